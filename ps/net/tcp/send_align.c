/*
 * The TCP van's choice between sending unaligned segments as they are and
 * sending them from an aligned copy (send_align.h).
 */
#include "ps/net/tcp/send_align.h"

#include <string.h>
#include <time.h>

#include "ps/base/log.h"

int ps_send_align_init(ps_send_align_t *a, const char *mode_text, ps_log_component_t log)
{
    memset(a, 0, sizeof(*a));
    pthread_mutex_init(&a->lock, NULL);
    a->mode = PS_SEND_ALIGN_AUTO;
    a->prefer_copy = -1;
    a->log = log;
    if (mode_text == NULL || mode_text[0] == '\0' || strcmp(mode_text, "auto") == 0) {
        return 0;
    }
    if (strcmp(mode_text, "on") == 0) {
        a->mode = PS_SEND_ALIGN_ALWAYS;
        return 0;
    }
    if (strcmp(mode_text, "off") == 0) {
        a->mode = PS_SEND_ALIGN_NEVER;
        return 0;
    }
    return -1;
}

void ps_send_align_fini(ps_send_align_t *a)
{
    pthread_mutex_destroy(&a->lock);
}

uint32_t ps_send_align_median(const ps_send_align_ring_t *r)
{
    uint32_t n = r->count < PS_SEND_ALIGN_RING ? r->count : PS_SEND_ALIGN_RING;
    if (n == 0) {
        return 0;
    }
    uint32_t v[PS_SEND_ALIGN_RING];
    memcpy(v, r->ps_per_byte, n * sizeof(v[0]));
    for (uint32_t i = 1; i < n; ++i) { /* insertion sort of at most 8 */
        uint32_t x = v[i];
        uint32_t j = i;
        for (; j > 0 && v[j - 1] > x; --j) {
            v[j] = v[j - 1];
        }
        v[j] = x;
    }
    return n % 2 ? v[n / 2] : (uint32_t)(((uint64_t)v[n / 2 - 1] + v[n / 2]) / 2);
}

static void ring_add(ps_send_align_ring_t *r, uint64_t ns, uint64_t bytes)
{
    uint64_t ps = bytes == 0 ? 0 : ns * 1000 / bytes;
    r->ps_per_byte[r->count % PS_SEND_ALIGN_RING] = ps > UINT32_MAX ? UINT32_MAX : (uint32_t)ps;
    r->count++;
}

/* Under the lock. */
static int choose_auto(ps_send_align_t *a)
{
    uint64_t n = a->decisions++;
    uint32_t want_copy = a->copied.count < a->copying.count ? a->copied.count : a->copying.count;
    if (a->direct.count < PS_SEND_ALIGN_WARMUP || want_copy < PS_SEND_ALIGN_WARMUP) {
        /* Still measuring: take the way with fewer figures. A way whose
         * sends give no figure (the socket is full) keeps its turn; past
         * PS_SEND_ALIGN_PATIENCE only at rechecks, so that such a sender
         * does not copy every other segment for good. */
        if (n < PS_SEND_ALIGN_PATIENCE || n % PS_SEND_ALIGN_RECHECK == PS_SEND_ALIGN_RECHECK - 1) {
            return want_copy < a->direct.count;
        }
        return 0;
    }
    uint32_t direct = ps_send_align_median(&a->direct);
    uint32_t copied = ps_send_align_median(&a->copied);
    uint32_t made = ps_send_align_median(&a->copying);
    int prefer_copy = (uint64_t)copied + made < direct;
    if (prefer_copy != a->prefer_copy) {
        ps_debug(a->log,
                 "large unaligned segments now leave %s: sent as they are %u ps/B, "
                 "from an aligned copy %u + %u ps/B",
                 prefer_copy ? "from an aligned copy" : "as they are", direct, copied, made);
        a->prefer_copy = prefer_copy;
    }
    if (n % PS_SEND_ALIGN_RECHECK == PS_SEND_ALIGN_RECHECK - 1) {
        return !prefer_copy;
    }
    return prefer_copy;
}

int ps_send_align_choose(ps_send_align_t *a)
{
    switch (a->mode) {
    case PS_SEND_ALIGN_ALWAYS:
        return 1;
    case PS_SEND_ALIGN_NEVER:
        return 0;
    default:
        break;
    }
    pthread_mutex_lock(&a->lock);
    int copy = choose_auto(a);
    pthread_mutex_unlock(&a->lock);
    return copy;
}

void ps_send_align_note_send(ps_send_align_t *a, ps_send_align_way_t way, uint64_t ns,
                             uint64_t bytes)
{
    if (a->mode != PS_SEND_ALIGN_AUTO || way == PS_SEND_ALIGN_NONE ||
        bytes < PS_SEND_ALIGN_MIN_SAMPLE) {
        return;
    }
    pthread_mutex_lock(&a->lock);
    ring_add(way == PS_SEND_ALIGN_DIRECT ? &a->direct : &a->copied, ns, bytes);
    pthread_mutex_unlock(&a->lock);
}

void ps_send_align_note_memcpy(ps_send_align_t *a, uint64_t ns, uint64_t bytes)
{
    if (a->mode != PS_SEND_ALIGN_AUTO) {
        return;
    }
    pthread_mutex_lock(&a->lock);
    ring_add(&a->copying, ns, bytes);
    pthread_mutex_unlock(&a->lock);
}

uint64_t ps_send_align_thread_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) {
        return 0;
    }
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
