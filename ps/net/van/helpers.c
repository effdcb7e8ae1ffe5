/*
 * Small helpers every van implementation needs the same way (van.h).
 */
#include <limits.h>
#include <stdint.h>
#include <unistd.h>

#include "ps/base/config.h"
#include "ps/base/log.h"
#include "ps/base/time.h"
#include "ps/net/van/van.h"

uint64_t ps_van_random_seed(const void *salt)
{
    return ps_time_now_ns() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)salt;
}

uint64_t ps_van_random(uint64_t *state)
{
    /* splitmix64 over an atomic counter: distinct values for concurrent
     * callers, no lock. */
    uint64_t z = __atomic_add_fetch(state, 0x9e3779b97f4a7c15ull, __ATOMIC_RELAXED);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

int ps_van_connect_timeout_ms(int requested_ms, int fallback_ms)
{
    if (requested_ms > 0) {
        return requested_ms;
    }
    int64_t ms = ps_config_int_or(PS_CFG_PS_CONNECT_TIMEOUT_MS, fallback_ms);
    return ms > 0 && ms < INT_MAX ? (int)ms : fallback_ms;
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
