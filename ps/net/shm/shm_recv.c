/*
 * The receive path of the shared-memory van (progress thread only): the
 * records of a channel's in ring become messages.
 *
 * As soon as a message's meta is decoded each data segment gets its
 * destination — the buffer the postoffice names through recv_buffer() (a
 * pull response lands in the worker's own buffer), else a pooled one — and
 * its bytes are put there: copied out of the record (INLINE), read from the
 * sender's memory with process_vm_readv() (CMA: the only copy), or from the
 * CHUNK records that follow (STREAM). A segment in a shared buffer of the
 * sender (SEG) is copied only into a named destination; otherwise the
 * message carries a view of the sender's bytes (memory kind
 * PS_BUF_MEM_SHM) and the sender hears when the last reference to it goes.
 *
 * Everything read from shared memory is checked before use (lengths,
 * offsets into records and segments, segment ids, tokens), and the fixed
 * part of a record is copied out first; memory a peer hands over is mapped
 * only when sealed against resizing (shm_seg.h), so that it cannot vanish
 * under us (SIGBUS), and only so much of it. A broken or hostile peer can
 * only get its channel closed (tests/shm/shm_hostile_test.cc).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include "ps/base/log.h"
#include "ps/net/shm/shm_internal.h"
#include "ps/net/shm/shm_meta.h"
#include "ps/net/shm/shm_seg.h"
#include "ps/net/van/rx.h"
/* Largest segment a peer may announce. */
#define RX_MAX_SEGMENT (1ull << 40)

/* ---- peer segments ---- */

void ps__shm_map_unref(ps__shm_map_t *m)
{
    if (__atomic_sub_fetch(&m->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        munmap(m->ptr, m->size);
        free(m);
    }
}

static void map_unref_cb(void *val)
{
    ps__shm_map_unref(val);
}

ps_status_t ps__shm_rx_add_segment(ps__shm_chan_t *ch, uint64_t id, uint64_t size, int fd)
{
    const char *bad = "out of range";
    if (id == 0 || size == 0 || size > RX_MAX_SEGMENT ||
        ps__shm_memfd_check(fd, size, &bad) != PS_OK) {
        close(fd);
        ps_error(PS_LOG_SHM, "node %d (pid %d) announced a bad segment (id %llu, %llu bytes: %s); closing",
                 ch->peer_id, (int)ch->peer_pid, (unsigned long long)id,
                 (unsigned long long)size, bad);
        return PS_ERR_PROTOCOL;
    }
    if (ps__shm_idmap_get(&ch->maps, id) != NULL) {
        close(fd); /* already mapped: harmless */
        return PS_OK;
    }
    if (ch->maps.count >= PS__SHM_MAX_PEER_SEGS ||
        size > PS__SHM_MAX_PEER_BYTES - ch->maps_bytes) {
        close(fd);
        ps_error(PS_LOG_SHM, "node %d shares more than %d segments or %llu bytes; closing",
                 ch->peer_id, PS__SHM_MAX_PEER_SEGS, (unsigned long long)PS__SHM_MAX_PEER_BYTES);
        return PS_ERR_TOO_LARGE;
    }
    /* Writable: a handler may work on a value in place, as with any other
     * receive buffer (the sender sees it; see ps/net/shm_alloc.h). */
    void *p = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        ps_error(PS_LOG_SHM, "mapping a segment of node %d (%llu bytes): %m", ch->peer_id,
                 (unsigned long long)size);
        return PS_ERR_NO_MEMORY;
    }
    ps__shm_map_t *m = malloc(sizeof(*m));
    if (m == NULL || ps__shm_idmap_put(&ch->maps, id, m) != PS_OK) {
        free(m);
        munmap(p, (size_t)size);
        return PS_ERR_NO_MEMORY;
    }
    m->id = id;
    m->ptr = p;
    m->size = (size_t)size;
    m->refs = 1; /* the channel's */
    ch->maps_bytes += size;
    return PS_OK;
}

/* A view of a peer's segment handed to the app: releasing it maps nothing
 * back, it tells the peer (ACK) and drops the mapping's reference. */
typedef struct {
    ps__shm_chan_t *ch;
    ps__shm_map_t *map;
    uint32_t token;
} zc_view_t;

static void zc_release(void *data, size_t len, void *arg)
{
    zc_view_t *z = arg;
    (void)data;
    (void)len;
    ps__shm_ack_later(z->ch, z->token);
    ps__shm_map_unref(z->map);
    ps__shm_chan_unref(z->ch);
    free(z);
}

void ps__shm_rx_reset(ps__shm_chan_t *ch)
{
    ps_msg_release(&ch->rmsg);
    ps_msg_init(&ch->rmsg);
    free(ch->rmeta);
    ch->rmeta = NULL;
    ch->rmeta_len = 0;
    ch->phase = PS__SHM_RX_IDLE;
    ch->rnum_parts = ch->rcur = 0;
    ch->roff = 0;
    ps__shm_idmap_clear(&ch->maps, map_unref_cb);
    ch->maps_bytes = 0;
}

static ps_status_t get_dest(ps__shm_chan_t *ch, unsigned i, uint64_t len, int pool_ok,
                            ps_slice_t *slice_p);

/* ---- pull destinations peers named ---- */

static size_t hint_slot(int peer, int app, int customer, int ts)
{
    uint64_t h = (uint64_t)(uint32_t)peer * 0x9e3779b97f4a7c15ull;
    h ^= (uint64_t)(uint32_t)app * 0xc2b2ae3d27d4eb4full;
    h ^= (uint64_t)(uint32_t)customer * 0x165667b19e3779f9ull;
    h ^= (uint64_t)(uint32_t)ts * 0xff51afd7ed558ccdull;
    h ^= h >> 29;
    return (size_t)h & (PS__SHM_HINTS - 1);
}

/* Remembers where the answer to this request goes; a slot taken by another
 * request is overwritten (that one is answered the ordinary way). */
static void hint_put(ps__shm_van_t *van, const ps__shm_hint_t *h)
{
    ps__shm_hint_t *slot = &van->hints[hint_slot(h->peer, h->app, h->customer, h->ts)];
    pthread_mutex_lock(&van->hints_lock);
    ps__shm_map_t *old = slot->map;
    *slot = *h;
    pthread_mutex_unlock(&van->hints_lock);
    if (old != NULL) {
        ps__shm_map_unref(old);
    }
}

int ps__shm_hint_take(ps__shm_van_t *van, int peer, int app, int customer, int ts,
                      ps__shm_hint_t *hint_p)
{
    ps__shm_hint_t *slot = &van->hints[hint_slot(peer, app, customer, ts)];
    int found = 0;
    pthread_mutex_lock(&van->hints_lock);
    if (slot->map != NULL && slot->peer == peer && slot->app == app &&
        slot->customer == customer && slot->ts == ts) {
        *hint_p = *slot;
        slot->map = NULL;
        found = 1;
    }
    pthread_mutex_unlock(&van->hints_lock);
    return found;
}

void ps__shm_hints_clear(ps__shm_van_t *van)
{
    for (size_t i = 0; i < PS__SHM_HINTS; ++i) {
        pthread_mutex_lock(&van->hints_lock);
        ps__shm_map_t *m = van->hints[i].map;
        van->hints[i].map = NULL;
        pthread_mutex_unlock(&van->hints_lock);
        if (m != NULL) {
            ps__shm_map_unref(m);
        }
    }
}

/* The request names where its answer goes (a segment of the peer's). */
static ps_status_t take_place(ps__shm_chan_t *ch, const ps__shm_rec_msg_t *h)
{
    if (ch->peer_id == PS_NODE_EMPTY) {
        return PS_OK; /* answered the ordinary way */
    }
    ps__shm_map_t *m = ps__shm_idmap_get(&ch->maps, h->place_seg);
    if (m == NULL) {
        ps_status_t st = ps__shm_read_packets(ch);
        if (st != PS_OK) {
            return st;
        }
        m = ps__shm_idmap_get(&ch->maps, h->place_seg);
    }
    if (m == NULL || h->place_off > m->size || h->place_len > m->size - h->place_off) {
        ps_error(PS_LOG_SHM, "node %d names a destination outside its segments; closing",
                 ch->peer_id);
        return PS_ERR_PROTOCOL;
    }
    ps__shm_hint_t hint = {.peer = ch->peer_id, .app = ch->rmsg.meta.app_id,
                           .customer = ch->rmsg.meta.customer_id,
                           .ts = ch->rmsg.meta.timestamp, .map = m, .off = h->place_off,
                           .len = h->place_len};
    __atomic_add_fetch(&m->refs, 1, __ATOMIC_RELAXED);
    hint_put(ch->van, &hint);
    return PS_OK;
}

/* A value the peer already wrote into our shared buffer (d->a, d->b): it
 * is in place when the named destination is that very buffer; otherwise
 * it is copied from there. */
static ps_status_t take_placed(ps__shm_chan_t *ch, unsigned i, const ps__shm_seg_desc_t *d)
{
    ps_slice_t *s = &ch->rmsg.data[i];
    if (get_dest(ch, i, d->len, 0, s) == PS_OK) {
        const ps__shm_seg_t *seg = ps__shm_seg_of(s->buf);
        if (seg != NULL && seg->id == d->a &&
            (uint64_t)((const uint8_t *)ps_slice_ptr(s) - (const uint8_t *)seg->base) == d->b) {
            return PS_OK;
        }
    } else if (ps_van_rx_pool_get(ch->van->sock.pool, (size_t)d->len, s) != PS_OK) {
        return PS_ERR_NO_MEMORY;
    }
    if (ps__shm_seg_copy_out(d->a, d->b, ps_slice_ptr(s), d->len) != PS_OK) {
        /* The buffer was freed before its pull completed: nothing to give. */
        ps_warn_ratelimited(PS_LOG_SHM, "the destination of a pull answered by node %d is gone",
                            ch->peer_id);
        ps_slice_unref(s);
    }
    return PS_OK;
}

/* ---- messages ---- */

/* Makes meta ch->rmsg's, with its own copy of the nodes and body. */
static ps_status_t own_meta(ps__shm_chan_t *ch, const ps_meta_t *meta)
{
    return ps_van_msg_take_meta(&ch->rmsg, meta, ch->peer_id);
}

/* Decodes a meta (codec.h, or the compact form) into ch->rmsg. */
static ps_status_t take_meta(ps__shm_chan_t *ch, const uint8_t *p, size_t len, int fast)
{
    ps__shm_van_t *van = ch->van;
    ps_meta_t meta;
    ps_status_t st;
    if (fast) {
        st = ps__shm_meta_fast_read(p, len, &meta);
        if (st != PS_OK) {
            ps_error(PS_LOG_SHM, "bad compact meta from node %d; closing the channel",
                     ch->peer_id);
            return PS_ERR_PROTOCOL;
        }
        return own_meta(ch, &meta);
    }
    st = ps_van_meta_decode(&van->base, p, len, ch->peer_id, NULL, &meta);
    if (st != PS_OK) {
        return st;
    }
    return own_meta(ch, &meta);
}

/* Where segment i (len bytes) lands: the postoffice's buffer or a pooled
 * one. */
static ps_status_t get_dest(ps__shm_chan_t *ch, unsigned i, uint64_t len, int pool_ok,
                            ps_slice_t *slice_p)
{
    ps__shm_van_t *van = ch->van;
    if (ps_van_recv_dest(&van->base, &ch->rmsg.meta, i, len, 0, slice_p) == PS_OK) {
        return PS_OK;
    }
    if (!pool_ok) {
        return PS_ERR_NOT_FOUND;
    }
    if (len <= PS__SHM_INLINE_MAX) {
        /* Small: one allocation (header and bytes) beats the pool. */
        return ps_slice_alloc((size_t)len, 0, slice_p);
    }
    return ps_van_rx_pool_get(van->sock.pool, (size_t)len, slice_p);
}

/* The step to copy into `dst` in: all at once unless its owner watches
 * (ps_slice_fill_watched). */
static uint64_t fill_step(const ps_slice_t *dst, uint64_t len)
{
    return ps_slice_fill_watched(dst) ? PS_SLICE_FILL_STEP : len;
}

/* Copies the len bytes at addr in the peer's memory into dst. */
static ps_status_t cma_read(ps__shm_chan_t *ch, const ps_slice_t *dst, uint64_t addr,
                            uint64_t len)
{
    uint8_t *p = ps_slice_ptr(dst);
    uint64_t step = fill_step(dst, len);
    uint64_t done = 0;
    while (done < len) {
        size_t want = (size_t)(len - done < step ? len - done : step);
        struct iovec local = {.iov_base = p + done, .iov_len = want};
        struct iovec remote = {.iov_base = (void *)(uintptr_t)(addr + done), .iov_len = want};
        ssize_t n = process_vm_readv(ch->peer_pid, &local, 1, &remote, 1, 0);
        if (n <= 0) {
            if (n < 0 && errno == EINTR) {
                continue;
            }
            int err = n < 0 ? errno : EFAULT;
            if (err == ESRCH) {
                return PS_ERR_PEER_GONE;
            }
            ps_error(PS_LOG_SHM, "reading %llu bytes from node %d (pid %d): %s; closing",
                     (unsigned long long)len, ch->peer_id, (int)ch->peer_pid, strerror(err));
            return PS_ERR_PROTOCOL;
        }
        done += (uint64_t)n;
        ps_slice_filled(dst, (size_t)done);
    }
    return PS_OK;
}

/* memcpy into dst, its progress reported as cma_read does. */
static void copy_in(const ps_slice_t *dst, const uint8_t *src, uint64_t len)
{
    uint8_t *p = ps_slice_ptr(dst);
    uint64_t step = fill_step(dst, len);
    for (uint64_t done = 0; done < len;) {
        uint64_t n = len - done < step ? len - done : step;
        memcpy(p + done, src + done, (size_t)n);
        done += n;
        ps_slice_filled(dst, (size_t)done);
    }
}

/* A peer segment view or a copy out of it, for descriptor d of segment i. */
static ps_status_t take_seg(ps__shm_chan_t *ch, unsigned i, const ps__shm_seg_desc_t *d)
{
    ps__shm_map_t *m = ps__shm_idmap_get(&ch->maps, d->a);
    if (m == NULL) {
        /* Its announcement is queued on the socket, ahead of this record. */
        ps_status_t st = ps__shm_read_packets(ch);
        if (st != PS_OK) {
            return st;
        }
        m = ps__shm_idmap_get(&ch->maps, d->a);
    }
    if (m == NULL || d->b > m->size || d->len > m->size - d->b) {
        ps_error(PS_LOG_SHM, "node %d refers to %s segment %llu; closing", ch->peer_id,
                 m == NULL ? "an unknown" : "outside of", (unsigned long long)d->a);
        return PS_ERR_PROTOCOL;
    }
    const uint8_t *src = (const uint8_t *)m->ptr + d->b;
    ps_slice_t s = PS_SLICE_EMPTY_INIT;
    ps_status_t st = get_dest(ch, i, d->len, 0, &s);
    if (st == PS_OK) {
        copy_in(&s, src, d->len);
        ch->rmsg.data[i] = s;
        ps__shm_ack_later(ch, d->token);
        return PS_OK;
    }
    zc_view_t *z = malloc(sizeof(*z));
    if (z == NULL) {
        return PS_ERR_NO_MEMORY;
    }
    ps_buf_t *buf;
    st = ps_buf_wrap_mem((void *)src, (size_t)d->len, PS_BUF_MEM_SHM, 0, zc_release, z, &buf);
    if (st != PS_OK) {
        free(z);
        return st;
    }
    z->ch = ch;
    z->map = m;
    z->token = d->token;
    __atomic_add_fetch(&ch->refs, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&m->refs, 1, __ATOMIC_RELAXED);
    ch->rmsg.data[i].buf = buf;
    ch->rmsg.data[i].off = 0;
    ch->rmsg.data[i].len = (size_t)d->len;
    return PS_OK;
}

/* Gives every segment its bytes or its place in the stream. rec is the MSG
 * record in the ring (inline bytes), NULL for a streamed meta. */
static ps_status_t take_segments(ps__shm_chan_t *ch, const ps__shm_seg_desc_t *desc,
                                 uint32_t num_seg, const uint8_t *rec)
{
    ps_msg_t *m = &ch->rmsg;
    m->num_data = num_seg;
    for (uint32_t i = 0; i < num_seg; ++i) {
        ps_slice_t empty = PS_SLICE_EMPTY_INIT;
        m->data[i] = empty;
    }
    for (uint32_t i = 0; i < num_seg; ++i) {
        const ps__shm_seg_desc_t *d = &desc[i];
        if (d->len == 0) {
            continue;
        }
        ps_status_t st;
        if (d->kind == PS__SHM_SEG_SEG || d->kind == PS__SHM_SEG_PLACED) {
            st = d->kind == PS__SHM_SEG_SEG ? take_seg(ch, i, d) : take_placed(ch, i, d);
            if (st != PS_OK) {
                return st;
            }
            continue;
        }
        st = get_dest(ch, i, d->len, 1, &m->data[i]);
        if (st != PS_OK) {
            ps_error(PS_LOG_SHM, "no buffer for %llu bytes from node %d (%s); closing",
                     (unsigned long long)d->len, ch->peer_id, ps_status_str(st));
            return st;
        }
        uint8_t *dst = ps_slice_ptr(&m->data[i]);
        switch (d->kind) {
        case PS__SHM_SEG_INLINE:
            memcpy(dst, rec + d->a, (size_t)d->len);
            break;
        case PS__SHM_SEG_CMA:
            st = cma_read(ch, &m->data[i], d->a, d->len);
            if (st != PS_OK) {
                return st;
            }
            ps__shm_ack_later(ch, d->token);
            break;
        default: /* STREAM */
            ch->rparts[ch->rnum_parts].ptr = dst;
            ch->rparts[ch->rnum_parts].len = d->len;
            ch->rpart_seg[ch->rnum_parts] = (int)i;
            ch->rnum_parts++;
            break;
        }
    }
    return PS_OK;
}

static ps_status_t on_msg(ps__shm_chan_t *ch, const uint8_t *rec, uint32_t rec_len, int *done_p)
{
    if (ch->phase != PS__SHM_RX_IDLE) {
        ps_error(PS_LOG_SHM, "node %d started a message inside another; closing", ch->peer_id);
        return PS_ERR_PROTOCOL;
    }
    ps__shm_rec_msg_t h;
    size_t head;
    ps_status_t st = ps__shm_rec_msg_head(rec, rec_len, ch->van->max_meta, ch->peer_id, &h, &head);
    if (st != PS_OK) {
        return st;
    }
    size_t descs = (size_t)h.num_seg * sizeof(ps__shm_seg_desc_t);
    /* The head out of shared memory, so that it cannot change under us. */
    if (ch->scratch_cap < head) {
        uint8_t *s = realloc(ch->scratch, head);
        if (s == NULL) {
            return PS_ERR_NO_MEMORY;
        }
        ch->scratch = s;
        ch->scratch_cap = head;
    }
    memcpy(ch->scratch, rec, head);
    const ps__shm_seg_desc_t *desc = (const ps__shm_seg_desc_t *)(void *)(ch->scratch + sizeof(h));
    st = ps__shm_rec_descs_check(desc, h.num_seg, h.meta_streamed, head, rec_len,
                                 ch->van->max_message, ch->peer_id);
    if (st != PS_OK) {
        return st;
    }
    ch->rnum_parts = 0;
    ch->rcur = 0;
    ch->roff = 0;
    if (h.meta_streamed) {
        /* The meta comes first in the stream; the segments (all streamed)
         * get their places once it is decoded. */
        ch->rmeta = malloc(h.meta_len);
        if (ch->rmeta == NULL) {
            return PS_ERR_NO_MEMORY;
        }
        ch->rmeta_len = h.meta_len;
        ch->rparts[0].ptr = ch->rmeta;
        ch->rparts[0].len = h.meta_len;
        ch->rpart_seg[0] = -1;
        ch->rnum_parts = 1;
        ch->rmsg.num_data = h.num_seg;
        for (uint32_t i = 0; i < h.num_seg; ++i) {
            /* Lengths kept in the slices until the meta is there. */
            ch->rmsg.data[i].buf = NULL;
            ch->rmsg.data[i].off = 0;
            ch->rmsg.data[i].len = (size_t)desc[i].len;
        }
        ch->phase = PS__SHM_RX_STREAM;
        return PS_OK;
    }
    st = take_meta(ch, ch->scratch + sizeof(h) + descs, h.meta_len,
                   (h.hdr.flags & PS__SHM_MSG_FAST_META) != 0);
    if (st == PS_OK && h.has_place) {
        st = take_place(ch, &h);
    }
    if (st == PS_OK) {
        st = take_segments(ch, desc, h.num_seg, rec);
    }
    if (st != PS_OK) {
        return st;
    }
    __atomic_add_fetch(&ch->van->base.bytes_recv, h.meta_len, __ATOMIC_RELAXED);
    if (ch->rnum_parts > 0) {
        ch->phase = PS__SHM_RX_STREAM;
    } else {
        *done_p = 1;
    }
    return PS_OK;
}

/* The streamed meta is complete: decode it and place the segments. */
static ps_status_t meta_arrived(ps__shm_chan_t *ch)
{
    uint32_t n = ch->rmsg.num_data;
    ps__shm_seg_desc_t desc[PS_MSG_MAX_DATA];
    for (uint32_t i = 0; i < n; ++i) {
        memset(&desc[i], 0, sizeof(desc[i]));
        desc[i].kind = PS__SHM_SEG_STREAM;
        desc[i].len = ch->rmsg.data[i].len;
    }
    ch->rmsg.num_data = 0;
    ps_status_t st = take_meta(ch, ch->rmeta, ch->rmeta_len, 0);
    __atomic_add_fetch(&ch->van->base.bytes_recv, ch->rmeta_len, __ATOMIC_RELAXED);
    free(ch->rmeta);
    ch->rmeta = NULL;
    ch->rmeta_len = 0;
    if (st != PS_OK) {
        return st;
    }
    return take_segments(ch, desc, n, NULL);
}

static ps_status_t on_chunk(ps__shm_chan_t *ch, const uint8_t *rec, uint32_t rec_len,
                            int *done_p)
{
    ps__shm_rec_chunk_t c;
    if (ch->phase != PS__SHM_RX_STREAM || rec_len < sizeof(c)) {
        ps_error(PS_LOG_SHM, "node %d sent a chunk outside a message; closing", ch->peer_id);
        return PS_ERR_PROTOCOL;
    }
    memcpy(&c, rec, sizeof(c));
    if (c.nbytes > rec_len - sizeof(c) || ch->rcur >= ch->rnum_parts ||
        c.nbytes > ch->rparts[ch->rcur].len - ch->roff) {
        ps_error(PS_LOG_SHM, "node %d sent a chunk that does not fit its message; closing",
                 ch->peer_id);
        return PS_ERR_PROTOCOL;
    }
    memcpy((uint8_t *)ch->rparts[ch->rcur].ptr + ch->roff, rec + sizeof(c), c.nbytes);
    ch->roff += c.nbytes;
    if (ch->rpart_seg[ch->rcur] >= 0) {
        ps_slice_filled(&ch->rmsg.data[ch->rpart_seg[ch->rcur]], (size_t)ch->roff);
    }
    while (ch->rcur < ch->rnum_parts && ch->roff == ch->rparts[ch->rcur].len) {
        int was_meta = ch->rmeta != NULL && ch->rcur == 0;
        ch->rcur++;
        ch->roff = 0;
        if (was_meta) {
            ps_status_t st = meta_arrived(ch);
            if (st != PS_OK) {
                return st;
            }
        }
    }
    if (ch->rcur == ch->rnum_parts) {
        ch->phase = PS__SHM_RX_IDLE;
        *done_p = 1;
    }
    return PS_OK;
}

static ps_status_t on_ack(ps__shm_chan_t *ch, const uint8_t *rec, uint32_t rec_len)
{
    ps__shm_rec_ack_t a;
    if (rec_len < sizeof(a)) {
        return PS_ERR_PROTOCOL;
    }
    memcpy(&a, rec, sizeof(a));
    if (a.count > (rec_len - sizeof(a)) / sizeof(uint32_t)) {
        ps_error(PS_LOG_SHM, "node %d sent a bad ack; closing", ch->peer_id);
        return PS_ERR_PROTOCOL;
    }
    return ps__shm_tokens_release(ch, (const uint32_t *)(const void *)(rec + sizeof(a)), a.count);
}

static ps_status_t on_id(ps__shm_chan_t *ch, const uint8_t *rec, uint32_t rec_len)
{
    ps__shm_rec_id_t r;
    if (rec_len < sizeof(r)) {
        return PS_ERR_PROTOCOL;
    }
    memcpy(&r, rec, sizeof(r));
    if (r.node_id <= 0 || r.node_id >= PS_NODE_EMPTY || ch->outgoing) {
        ps_error(PS_LOG_SHM, "pid %d announced node id %d on a channel where it may not; closing",
                 (int)ch->peer_pid, r.node_id);
        return PS_ERR_PROTOCOL;
    }
    if (ch->peer_id == r.node_id) {
        return PS_OK;
    }
    if (ch->peer_id != PS_NODE_EMPTY) {
        ps_error(PS_LOG_SHM, "node %d (pid %d) re-announced itself as node %d; closing",
                 ch->peer_id, (int)ch->peer_pid, r.node_id);
        return PS_ERR_PROTOCOL;
    }
    ps_status_t st = ps__shm_peer_add_in(ch->van, ch, r.node_id);
    if (st == PS_OK) {
        ps_info(PS_LOG_SHM, "pid %d is node %d", (int)ch->peer_pid, r.node_id);
    }
    return st;
}

static void deliver(ps__shm_chan_t *ch)
{
    ps__shm_van_t *van = ch->van;
    ps_msg_t msg = ch->rmsg;
    ps_msg_init(&ch->rmsg);
    msg.meta.sender = ch->peer_id;
    ps_van_base_count_recv(&van->base, ps_msg_data_bytes(&msg));
    ps_van_base_deliver(&van->base, &msg);
}

int ps__shm_rx_poll(ps__shm_chan_t *ch, int budget)
{
    int n = 0;
    int bell = 0;
    while (n < budget && ch->state != PS__SHM_CH_DEAD) {
        const uint8_t *rec;
        ps__shm_rec_t hdr;
        ps_status_t st = ps__shm_ring_peek(&ch->rx, &rec, &hdr, &bell);
        if (st != PS_OK) {
            ps_error(PS_LOG_SHM, "node %d broke the ring's framing; closing", ch->peer_id);
            ps__shm_chan_fail(ch, PS_ERR_PROTOCOL, 1);
            return n + 1;
        }
        if (rec == NULL) {
            break;
        }
        int done = 0;
        switch (hdr.type) {
        case PS__SHM_REC_MSG:
            st = on_msg(ch, rec, hdr.len, &done);
            break;
        case PS__SHM_REC_CHUNK:
            st = on_chunk(ch, rec, hdr.len, &done);
            break;
        case PS__SHM_REC_ACK:
            st = on_ack(ch, rec, hdr.len);
            break;
        case PS__SHM_REC_ID:
            st = on_id(ch, rec, hdr.len);
            break;
        default:
            ps_error(PS_LOG_SHM, "node %d sent an unknown record type %u; closing", ch->peer_id,
                     hdr.type);
            st = PS_ERR_PROTOCOL;
            break;
        }
        n++;
        if (st != PS_OK || ch->state == PS__SHM_CH_DEAD) {
            ps__shm_chan_fail(ch, st != PS_OK ? st : PS_ERR_PEER_GONE, 1);
            return n;
        }
        if (ps__shm_ring_consume(&ch->rx, hdr.len)) {
            bell = 1;
        }
        if (done) {
            /* After the record is freed: the peer may write on while the
             * handler runs. */
            deliver(ch);
        }
    }
    if (bell) {
        pthread_mutex_lock(&ch->tx_lock);
        ps__shm_bell(ch);
        pthread_mutex_unlock(&ch->tx_lock);
    }
    return n;
}
