/*
 * The record ring of shm_ring.h.
 */
#include "ps/net/shm/shm_ring.h"

#include <string.h>

size_t ps__shm_ring_bytes(uint64_t size)
{
    return sizeof(ps__shm_ring_ctl_t) + (size_t)size;
}

void ps__shm_ring_init(void *mem, uint64_t size)
{
    (void)size;
    memset(mem, 0, sizeof(ps__shm_ring_ctl_t));
}

void ps__shm_ring_attach(ps__shm_ring_t *r, void *mem, uint64_t size)
{
    r->ctl = mem;
    r->data = (uint8_t *)mem + sizeof(ps__shm_ring_ctl_t);
    r->size = size;
    r->mask = size - 1;
    r->pos = 0;
    r->peer = 0;
}

/* ---- producer ---- */

/* Bytes a record of len needs from the current position: itself, plus the
 * padding to the end of the area when it does not fit there. */
static uint64_t need_for(const ps__shm_ring_t *r, uint32_t len)
{
    uint64_t contig = r->size - (r->pos & r->mask);
    return len <= contig ? len : contig + len;
}

static int has_room(ps__shm_ring_t *r, uint64_t need)
{
    if (r->size - (r->pos - r->peer) >= need) {
        return 1;
    }
    r->peer = __atomic_load_n(&r->ctl->head, __ATOMIC_ACQUIRE);
    /* A head beyond our tail is the peer's lie; treat it as a full ring. */
    if (r->peer > r->pos || r->pos - r->peer > r->size) {
        r->peer = r->pos - r->size;
        return 0;
    }
    return r->size - (r->pos - r->peer) >= need;
}

/* Fills the rest of the area with a PAD record. */
static void pad_to_end(ps__shm_ring_t *r)
{
    uint64_t off = r->pos & r->mask;
    ps__shm_rec_t pad = {.len = (uint32_t)(r->size - off), .type = PS__SHM_REC_PAD, .flags = 0};
    memcpy(r->data + off, &pad, sizeof(pad));
    r->pos += r->size - off;
}

void *ps__shm_ring_reserve(ps__shm_ring_t *r, uint32_t len)
{
    if (len == 0 || len % PS__SHM_REC_ALIGN != 0 || len > r->size / 2) {
        return NULL;
    }
    if (!has_room(r, need_for(r, len))) {
        return NULL;
    }
    if (len > r->size - (r->pos & r->mask)) {
        pad_to_end(r);
    }
    void *p = r->data + (r->pos & r->mask);
    r->pos += len;
    return p;
}

void *ps__shm_ring_reserve_upto(ps__shm_ring_t *r, uint32_t min_len, uint32_t max_len,
                                uint32_t *len_p)
{
    min_len = (min_len + PS__SHM_REC_ALIGN - 1) & ~(PS__SHM_REC_ALIGN - 1);
    max_len &= ~(PS__SHM_REC_ALIGN - 1);
    if (min_len == 0 || min_len > max_len || min_len > r->size / 2) {
        return NULL;
    }
    if (max_len > r->size / 2) {
        max_len = (uint32_t)(r->size / 2);
    }
    if (!has_room(r, need_for(r, min_len))) {
        return NULL;
    }
    if (min_len > r->size - (r->pos & r->mask)) {
        pad_to_end(r);
    }
    uint64_t contig = r->size - (r->pos & r->mask);
    uint64_t free_bytes = r->size - (r->pos - r->peer);
    uint64_t n = contig < free_bytes ? contig : free_bytes;
    if (n > max_len) {
        n = max_len;
    }
    n &= ~(uint64_t)(PS__SHM_REC_ALIGN - 1);
    void *p = r->data + (r->pos & r->mask);
    r->pos += n;
    *len_p = (uint32_t)n;
    return p;
}

int ps__shm_ring_commit(ps__shm_ring_t *r)
{
    __atomic_store_n(&r->ctl->tail, r->pos, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&r->ctl->rx_sleeping, __ATOMIC_SEQ_CST) != 0) {
        return __atomic_exchange_n(&r->ctl->rx_sleeping, 0, __ATOMIC_SEQ_CST) != 0;
    }
    return 0;
}

int ps__shm_ring_wait_room(ps__shm_ring_t *r, uint32_t len)
{
    __atomic_store_n(&r->ctl->tx_waiting, 1, __ATOMIC_SEQ_CST);
    if (has_room(r, need_for(r, len))) {
        __atomic_store_n(&r->ctl->tx_waiting, 0, __ATOMIC_RELAXED);
        return 1;
    }
    return 0;
}

/* ---- consumer ---- */

static int publish_head(ps__shm_ring_t *r)
{
    __atomic_store_n(&r->ctl->head, r->pos, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&r->ctl->tx_waiting, __ATOMIC_SEQ_CST) != 0) {
        return __atomic_exchange_n(&r->ctl->tx_waiting, 0, __ATOMIC_SEQ_CST) != 0;
    }
    return 0;
}

ps_status_t ps__shm_ring_peek(ps__shm_ring_t *r, const uint8_t **rec_p, ps__shm_rec_t *hdr_p,
                              int *wake_p)
{
    *rec_p = NULL;
    for (;;) {
        if (r->pos == r->peer) {
            uint64_t tail = __atomic_load_n(&r->ctl->tail, __ATOMIC_ACQUIRE);
            if (tail - r->pos > r->size || (tail - r->pos) % PS__SHM_REC_ALIGN != 0) {
                return PS_ERR_PROTOCOL;
            }
            r->peer = tail;
            if (r->pos == r->peer) {
                return PS_OK;
            }
        }
        uint64_t off = r->pos & r->mask;
        uint64_t contig = r->size - off;
        uint64_t avail = r->peer - r->pos;
        ps__shm_rec_t hdr;
        memcpy(&hdr, r->data + off, sizeof(hdr));
        if (hdr.len < sizeof(hdr) || hdr.len % PS__SHM_REC_ALIGN != 0 || hdr.len > contig ||
            hdr.len > avail) {
            return PS_ERR_PROTOCOL;
        }
        if (hdr.type == PS__SHM_REC_PAD) {
            r->pos += hdr.len;
            if (publish_head(r)) {
                *wake_p = 1;
            }
            continue;
        }
        *hdr_p = hdr;
        *rec_p = r->data + off;
        return PS_OK;
    }
}

int ps__shm_ring_consume(ps__shm_ring_t *r, uint32_t len)
{
    r->pos += len;
    return publish_head(r);
}

int ps__shm_ring_readable(ps__shm_ring_t *r)
{
    return r->pos != r->peer || __atomic_load_n(&r->ctl->tail, __ATOMIC_ACQUIRE) != r->pos;
}

int ps__shm_ring_sleep(ps__shm_ring_t *r)
{
    __atomic_store_n(&r->ctl->rx_sleeping, 1, __ATOMIC_SEQ_CST);
    if (r->pos != r->peer || __atomic_load_n(&r->ctl->tail, __ATOMIC_SEQ_CST) != r->pos) {
        __atomic_store_n(&r->ctl->rx_sleeping, 0, __ATOMIC_RELAXED);
        return 1;
    }
    return 0;
}

void ps__shm_ring_awake(ps__shm_ring_t *r)
{
    __atomic_store_n(&r->ctl->rx_sleeping, 0, __ATOMIC_RELAXED);
}
