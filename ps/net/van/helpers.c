/*
 * Small helpers every van implementation needs the same way (van.h).
 */
#include <errno.h>
#include <limits.h>
#include <sodium.h>
#include <stdint.h>

#include "ps/base/config.h"
#include "ps/base/log.h"
#include "ps/base/time.h"
#include "ps/net/van/van.h"

#include <unistd.h>

#define CONNECT_BACKOFF_FIRST_MS 10
#define CONNECT_BACKOFF_MAX_MS 500

void ps_van_wake_fd(int fd)
{
    uint64_t one = 1;
    ssize_t r;
    do {
        r = write(fd, &one, sizeof(one));
    } while (r < 0 && errno == EINTR);
    /* EAGAIN: the counter is already non-zero, a wake-up is pending. */
}

void ps_van_random_bytes(void *buf, size_t len)
{
    /* libsodium's generator: keyed from the kernel's, re-keyed after fork(),
     * thread-safe. sodium_init() is idempotent and cheap once done. */
    if (sodium_init() < 0) {
        ps_warn_ratelimited(PS_LOG_VAN, "libsodium cannot initialise (no random source?)");
    }
    randombytes_buf(buf, len);
}

uint64_t ps_van_random(void)
{
    uint64_t x;
    ps_van_random_bytes(&x, sizeof(x));
    return x;
}

int ps_van_connect_timeout_ms(int requested_ms, int fallback_ms)
{
    if (requested_ms > 0) {
        return requested_ms;
    }
    int64_t ms = ps_config_int_or(PS_CFG_PS_CONNECT_TIMEOUT_MS, fallback_ms);
    return ms > 0 && ms < INT_MAX ? (int)ms : fallback_ms;
}

uint64_t ps_van_connect_backoff(uint32_t *backoff_ms_p, uint64_t now_ns)
{
    uint32_t ms = *backoff_ms_p == 0 ? CONNECT_BACKOFF_FIRST_MS : *backoff_ms_p * 2;
    *backoff_ms_p = ms > CONNECT_BACKOFF_MAX_MS ? CONNECT_BACKOFF_MAX_MS : ms;
    return now_ns + (uint64_t)*backoff_ms_p * PS_NSEC_PER_MSEC;
}

void ps_van_deliver_lane(const ps_van_callbacks_t *cb, ps_log_component_t comp, int sender,
                         const uint8_t *bytes, size_t len)
{
    if (ps_unlikely(PS_LOG_TRACE <= ps__log_level))
        ps_trace(comp, "received a %zu-byte lane message from node %d", len, sender);
    if (cb->deliver_lane == NULL) {
        ps_warn_ratelimited(comp, "a lane message from node %d, and nobody to take it; dropped",
                            sender);
        return;
    }
    cb->deliver_lane(cb->arg, sender, bytes, len);
}
