/*
 * The send path of the shared-memory van.
 *
 * send() encodes the meta and writes one MSG record into the channel's out
 * ring, choosing for each data segment how its bytes travel:
 *   - INLINE (up to PS__SHM_INLINE_MAX): copied into the record;
 *   - SEG: the slice lies in a buffer of ps_shm_buf_alloc(); only (segment,
 *     offset, length) is written, after the segment was announced once;
 *     no copy at all;
 *   - CMA: the peer said it can read our memory; only (address, length) is
 *     written and the peer copies the bytes straight where they belong
 *     (process_vm_readv), one copy;
 *   - STREAM: otherwise, the bytes follow in CHUNK records (a copy in, a
 *     copy out).
 * For SEG and CMA the van keeps a reference on the slice under a token
 * until the peer acknowledges it (it has copied, or let go of its view).
 *
 * What the ring cannot take now is queued on the channel and written by the
 * progress thread as the peer makes room (it rings our bell when we said we
 * wait). Messages and their chunks enter the ring in send() order; ACK
 * records may come between chunks.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "ps/base/log.h"
#include "ps/net/codec/codec.h"
#include "ps/net/shm/shm_internal.h"
#include "ps/net/shm/shm_meta.h"
#include "ps/net/shm/shm_seg.h"
#include "ps/net/shm/shm_stage.h"

/* Encoded metas up to this size stay on the stack. */
#define META_STACK 2048
/* A meta bigger than this is streamed (the record keeps room for inline
 * segments). */
#define META_INLINE_MAX (PS__SHM_MSG_MAX / 2)
/* Tokens per ACK record. */
#define ACK_BATCH 1024

/* ---- tokens ---- */

static ps_status_t token_get(ps__shm_chan_t *ch, const ps_slice_t *s, uint32_t *tok_p)
{
    if (ch->tok_free == UINT32_MAX) {
        uint32_t cap = ch->tok_cap ? ch->tok_cap * 2 : 64;
        ps__shm_token_t *t = realloc(ch->tokens, (size_t)cap * sizeof(*t));
        if (t == NULL) {
            return PS_ERR_NO_MEMORY;
        }
        for (uint32_t i = ch->tok_cap; i < cap; ++i) {
            ps_slice_t empty = PS_SLICE_EMPTY_INIT;
            t[i].slice = empty;
            t[i].next_free = i + 1 < cap ? i + 1 : UINT32_MAX;
        }
        ch->tokens = t;
        ch->tok_free = ch->tok_cap;
        ch->tok_cap = cap;
    }
    uint32_t k = ch->tok_free;
    ch->tok_free = ch->tokens[k].next_free;
    ch->tokens[k].slice = ps_slice_ref(s);
    ch->tokens[k].next_free = UINT32_MAX;
    ch->tok_live++;
    *tok_p = k;
    return PS_OK;
}

/* Takes the slice of token k out (tx_lock held); 0 if k is not out. */
static int token_take(ps__shm_chan_t *ch, uint32_t k, ps_slice_t *out)
{
    if (k >= ch->tok_cap || ch->tokens[k].slice.buf == NULL) {
        return 0;
    }
    *out = ch->tokens[k].slice;
    ps_slice_t empty = PS_SLICE_EMPTY_INIT;
    ch->tokens[k].slice = empty;
    ch->tokens[k].next_free = ch->tok_free;
    ch->tok_free = k;
    ch->tok_live--;
    return 1;
}

ps_status_t ps__shm_tokens_release(ps__shm_chan_t *ch, const uint32_t *tokens, uint32_t n)
{
    ps_slice_t local[64];
    ps_status_t st = PS_OK;
    uint32_t i = 0;
    while (i < n && st == PS_OK) {
        uint32_t m = 0;
        pthread_mutex_lock(&ch->tx_lock);
        for (; i < n && m < 64; ++i) {
            uint32_t k;
            memcpy(&k, &tokens[i], sizeof(k));
            if (!token_take(ch, k, &local[m])) {
                st = PS_ERR_PROTOCOL;
                break;
            }
            m++;
        }
        pthread_mutex_unlock(&ch->tx_lock);
        /* Dropped outside the lock: a release may run arbitrary code. */
        for (uint32_t j = 0; j < m; ++j) {
            ps_slice_unref(&local[j]);
        }
    }
    if (st != PS_OK) {
        ps_error(PS_LOG_SHM, "node %d acknowledged a token it does not hold; closing",
                 ch->peer_id);
    }
    return st;
}

/* ---- queue entries ---- */

static void entry_free(ps__shm_entry_t *e)
{
    for (uint32_t i = 0; i < e->num_refs; ++i) {
        ps_slice_unref(&e->refs[i]);
    }
    free(e->rec);
    free(e->meta_heap);
    free(e);
}

static void entries_free(ps__shm_entry_t *list)
{
    while (list != NULL) {
        ps__shm_entry_t *next = list->next;
        entry_free(list);
        list = next;
    }
}

static void enqueue(ps__shm_chan_t *ch, ps__shm_entry_t *e)
{
    e->next = NULL;
    if (ch->sq_tail != NULL) {
        ch->sq_tail->next = e;
    } else {
        ch->sq_head = e;
    }
    ch->sq_tail = e;
}

/* Tells the progress thread (if we are not it) that a queue needs it. */
static void kick_flush(ps__shm_chan_t *ch)
{
    __atomic_store_n(&ch->want_flush, 1, __ATOMIC_SEQ_CST);
    if (!ps__shm_on_progress(ch->van)) {
        __atomic_store_n(&ch->van->tx_kick, 1, __ATOMIC_SEQ_CST);
        ps__shm_wake(ch->van);
    }
}

/* Writes CHUNK records for parts[*cur..] from *off while the ring has
 * room; 1 when every part is written. */
static int write_parts(ps__shm_ring_t *r, const ps__shm_part_t *parts, uint32_t n, uint32_t *cur,
                       uint64_t *off)
{
    const uint32_t hdr = (uint32_t)sizeof(ps__shm_rec_chunk_t);
    while (*cur < n) {
        uint64_t left = parts[*cur].len - *off;
        if (left == 0) {
            (*cur)++;
            *off = 0;
            continue;
        }
        uint64_t want = left < PS__SHM_CHUNK_MAX ? left : PS__SHM_CHUNK_MAX;
        uint64_t least = want < PS__SHM_CHUNK_MIN ? want : PS__SHM_CHUNK_MIN;
        uint32_t got = 0;
        uint8_t *p = ps__shm_ring_reserve_upto(r, ps__shm_align8(hdr + least),
                                               ps__shm_align8(hdr + want), &got);
        if (p == NULL) {
            return 0;
        }
        uint64_t nbytes = got - hdr < left ? got - hdr : left;
        ps__shm_rec_chunk_t c;
        memset(&c, 0, sizeof(c));
        c.hdr.len = got;
        c.hdr.type = PS__SHM_REC_CHUNK;
        c.nbytes = (uint32_t)nbytes;
        memcpy(p, &c, sizeof(c));
        memcpy(p + hdr, parts[*cur].ptr + *off, nbytes);
        *off += nbytes;
    }
    return 1;
}

/* ---- building a message ---- */

typedef struct {
    ps__shm_seg_desc_t desc[PS_MSG_MAX_DATA];
    uint32_t num_seg;
    const uint8_t *meta;
    uint32_t meta_len;
    int meta_streamed;
    int meta_fast;
    uint32_t rec_len;
    ps__shm_part_t parts[1 + PS_MSG_MAX_DATA];
    uint32_t num_parts;
    uint32_t stream_idx[PS_MSG_MAX_DATA]; /* segments streamed, in order */
    uint32_t num_stream;
    /* Segments already written into the peer's buffer (PLACED). */
    int placed[PS_MSG_MAX_DATA];
    uint64_t placed_seg[PS_MSG_MAX_DATA], placed_off[PS_MSG_MAX_DATA];
    /* A pull request: where its answer may be written. */
    int has_place;
    uint64_t place_seg, place_off, place_len;
} plan_t;

/* Writes the MSG record of the plan at p. */
static void write_record(const plan_t *pl, const ps_msg_t *msg, uint8_t *p)
{
    ps__shm_rec_msg_t h;
    memset(&h, 0, sizeof(h));
    h.hdr.len = pl->rec_len;
    h.hdr.type = PS__SHM_REC_MSG;
    h.hdr.flags = pl->meta_fast ? PS__SHM_MSG_FAST_META : 0;
    h.meta_len = pl->meta_len;
    h.num_seg = (uint16_t)pl->num_seg;
    h.meta_streamed = (uint8_t)pl->meta_streamed;
    h.has_place = (uint8_t)pl->has_place;
    h.place_seg = pl->place_seg;
    h.place_off = pl->place_off;
    h.place_len = pl->place_len;
    memcpy(p, &h, sizeof(h));
    memcpy(p + sizeof(h), pl->desc, pl->num_seg * sizeof(pl->desc[0]));
    size_t off = sizeof(h) + pl->num_seg * sizeof(pl->desc[0]);
    if (!pl->meta_streamed) {
        memcpy(p + off, pl->meta, pl->meta_len);
    }
    for (uint32_t i = 0; i < pl->num_seg; ++i) {
        if (pl->desc[i].kind == PS__SHM_SEG_INLINE && pl->desc[i].len != 0) {
            memcpy(p + pl->desc[i].a, ps_slice_ptr(&msg->data[i]), pl->desc[i].len);
        }
    }
}

/* Chooses how each segment travels (tx_lock held: tx_cma, the announced
 * segments and tokens are the channel's); staged[i], when not empty, is a
 * shared copy of segment i. On failure no token is out. */
static ps_status_t plan_segments(ps__shm_chan_t *ch, const ps_msg_t *msg,
                                 const ps_slice_t *staged, plan_t *pl)
{
    ps__shm_van_t *van = ch->van;
    size_t off = sizeof(ps__shm_rec_msg_t) + msg->num_data * sizeof(ps__shm_seg_desc_t) +
                 (pl->meta_streamed ? 0 : pl->meta_len);
    off = ps__shm_align8(off);
    pl->num_seg = msg->num_data;
    pl->num_stream = 0;
    ps_status_t st = PS_OK;
    uint32_t i = 0;
    for (; i < msg->num_data; ++i) {
        const ps_slice_t *s = &msg->data[i];
        ps__shm_seg_desc_t *d = &pl->desc[i];
        memset(d, 0, sizeof(*d));
        d->len = s->len;
        if (pl->placed[i]) {
            d->kind = PS__SHM_SEG_PLACED;
            d->a = pl->placed_seg[i];
            d->b = pl->placed_off[i];
            continue;
        }
        if (!pl->meta_streamed && s->len <= PS__SHM_INLINE_MAX) {
            d->kind = PS__SHM_SEG_INLINE;
            d->a = off;
            off += ps__shm_align8(s->len);
            continue;
        }
        const ps_slice_t *shared = staged[i].buf != NULL ? &staged[i] : s;
        const ps__shm_seg_t *seg = NULL;
        if (!pl->meta_streamed && (shared != s || van->allow_seg)) {
            seg = ps__shm_seg_of(shared->buf);
        }
        if (seg != NULL) {
            int known = ps__shm_idmap_get(&ch->announced, seg->id) != NULL;
            if (!known && ps__shm_announce(ch, seg->id, seg->size, seg->fd) == PS_OK) {
                known = ps__shm_idmap_put(&ch->announced, seg->id, (void *)1) == PS_OK;
            }
            if (known) {
                if ((st = token_get(ch, shared, &d->token)) != PS_OK) {
                    break;
                }
                d->kind = PS__SHM_SEG_SEG;
                d->a = seg->id;
                d->b = (uint64_t)((const uint8_t *)ps_slice_ptr(shared) -
                                  (const uint8_t *)seg->base);
                continue;
            }
        }
        if (!pl->meta_streamed && ch->tx_cma) {
            if ((st = token_get(ch, s, &d->token)) != PS_OK) {
                break;
            }
            d->kind = PS__SHM_SEG_CMA;
            d->a = (uint64_t)(uintptr_t)ps_slice_ptr(s);
            continue;
        }
        d->kind = PS__SHM_SEG_STREAM;
        pl->stream_idx[pl->num_stream++] = i;
    }
    if (st != PS_OK) {
        for (uint32_t j = 0; j < i; ++j) {
            ps__shm_seg_desc_t *d = &pl->desc[j];
            ps_slice_t s;
            if ((d->kind == PS__SHM_SEG_SEG || d->kind == PS__SHM_SEG_CMA) &&
                token_take(ch, d->token, &s)) {
                ps_slice_unref(&s);
            }
        }
        return st;
    }
    pl->rec_len = ps__shm_align8(off);
    pl->num_parts = 0;
    if (pl->meta_streamed) {
        pl->parts[pl->num_parts].ptr = pl->meta;
        pl->parts[pl->num_parts].len = pl->meta_len;
        pl->num_parts++;
    }
    for (uint32_t k = 0; k < pl->num_stream; ++k) {
        const ps_slice_t *s = &msg->data[pl->stream_idx[k]];
        pl->parts[pl->num_parts].ptr = ps_slice_ptr(s);
        pl->parts[pl->num_parts].len = s->len;
        pl->num_parts++;
    }
    return PS_OK;
}

/* An entry for what of the plan is not written: the record (unless
 * written), and the streamed parts from (cur, off). */
static ps__shm_entry_t *entry_of_plan(const plan_t *pl, const ps_msg_t *msg, int rec_written,
                                      uint32_t cur, uint64_t off, uint8_t **meta_heap)
{
    ps__shm_entry_t *e = calloc(1, sizeof(*e));
    if (e == NULL) {
        return NULL;
    }
    if (!rec_written) {
        e->rec = malloc(pl->rec_len);
        if (e->rec == NULL) {
            free(e);
            return NULL;
        }
        write_record(pl, msg, e->rec);
        e->rec_len = pl->rec_len;
    }
    memcpy(e->parts, pl->parts, pl->num_parts * sizeof(pl->parts[0]));
    e->num_parts = pl->num_parts;
    e->cur = cur;
    e->off = off;
    for (uint32_t k = 0; k < pl->num_stream; ++k) {
        e->refs[e->num_refs++] = ps_slice_ref(&msg->data[pl->stream_idx[k]]);
    }
    if (pl->meta_streamed) {
        /* The part points at the heap copy, which the entry now owns. */
        e->meta_heap = *meta_heap;
        *meta_heap = NULL;
    }
    return e;
}

static ps_status_t encode_meta(ps__shm_van_t *van, const ps_msg_t *msg, uint8_t *stack,
                               size_t cap, plan_t *pl, uint8_t **heap_p)
{
    const ps_meta_t *meta = &msg->meta;
    ps_meta_t with_nodes;
    if (meta->control.num_nodes == 0 && msg->num_nodes != 0) {
        /* The node list rides in the message rather than the meta. */
        with_nodes = *meta;
        with_nodes.control.nodes = msg->nodes;
        with_nodes.control.num_nodes = msg->num_nodes;
        meta = &with_nodes;
    }
    size_t len = 0;
    pl->meta_fast = 0;
    if (ps__shm_meta_fast_size(meta, &len) && len <= cap) {
        ps__shm_meta_fast_write(meta, stack);
        pl->meta = stack;
        pl->meta_len = (uint32_t)len;
        pl->meta_fast = 1;
        pl->meta_streamed = 0;
        return PS_OK;
    }
    ps_status_t st = ps_meta_encode(meta, stack, cap, &len);
    if (st == PS_ERR_TOO_LARGE) {
        size_t need = 0;
        if ((st = ps_meta_encoded_size(meta, &need)) != PS_OK) {
            return st;
        }
        if (need > van->max_meta) {
            ps_error(PS_LOG_SHM, "send: meta of %zu bytes is over the limit (%u, PS_MAX_META_BYTES)",
                     need, van->max_meta);
            return PS_ERR_TOO_LARGE;
        }
        uint8_t *heap = malloc(need);
        if (heap == NULL) {
            return PS_ERR_NO_MEMORY;
        }
        st = ps_meta_encode(meta, heap, need, &len);
        if (st != PS_OK) {
            free(heap);
            return st;
        }
        *heap_p = heap;
        pl->meta = heap;
    } else if (st != PS_OK) {
        return st;
    } else {
        pl->meta = stack;
    }
    pl->meta_len = (uint32_t)len;
    pl->meta_streamed = len > META_INLINE_MAX;
    return PS_OK;
}

static void unref_staged(ps_slice_t *staged, uint32_t n)
{
    for (uint32_t i = 0; i < n; ++i) {
        ps_slice_unref(&staged[i]);
    }
}

/* Copies the large segments that are not in shared memory into staging
 * segments, before the channel is locked (the copy is the slow part), so
 * that the receiver uses them in place. A pull response goes by CMA
 * instead when the peer can read us: it lands in the buffer the worker
 * named, one copy either way, and that copy is the receiver's. Without
 * staging room (or allowed CMA), the value is streamed. */
static void stage_segments(ps__shm_chan_t *ch, const ps_msg_t *msg, const plan_t *pl,
                           ps_slice_t *staged)
{
    ps__shm_van_t *van = ch->van;
    int cma = __atomic_load_n(&ch->tx_cma, __ATOMIC_ACQUIRE);
    int pull_response = msg->meta.pull && !msg->meta.request;
    for (uint32_t i = 0; i < msg->num_data; ++i) {
        ps_slice_t empty = PS_SLICE_EMPTY_INIT;
        staged[i] = empty;
        const ps_slice_t *s = &msg->data[i];
        if (pl->placed[i] || pl->meta_streamed || s->len <= PS__SHM_INLINE_MAX ||
            !van->allow_stage ||
            (van->allow_seg && ps__shm_seg_of(s->buf) != NULL) || (pull_response && cma)) {
            continue;
        }
        if (ps__shm_stage_get(van->stage, s->len, &staged[i]) == PS_OK) {
            memcpy(ps_slice_ptr(&staged[i]), ps_slice_ptr(s), s->len);
        }
    }
}

/* An answer to a pull whose requester named a shared destination: the
 * value is written straight into it (the only copy, at memcpy speed), and
 * the record only says so. */
static void place_answer(ps__shm_van_t *van, const ps_msg_t *msg, plan_t *pl)
{
    memset(pl->placed, 0, sizeof(pl->placed));
    if (msg->meta.request || !msg->meta.pull || msg->num_data < 2 || pl->meta_streamed ||
        msg->data[1].len <= PS__SHM_INLINE_MAX || !van->allow_seg) {
        return;
    }
    ps__shm_hint_t h;
    if (!ps__shm_hint_take(van, msg->meta.recver, msg->meta.app_id, msg->meta.customer_id,
                           msg->meta.timestamp, &h)) {
        return;
    }
    if (h.len == msg->data[1].len) {
        uint8_t *dst = (uint8_t *)h.map->ptr + h.off;
        const uint8_t *src = ps_slice_ptr(&msg->data[1]);
        /* A value pushed from the buffer it is now pulled into (the server
         * kept the worker's shared buffer) is there already: no copy. Other
         * overlaps of one segment go through memmove. */
        if (dst != src) {
            if (src < dst + h.len && dst < src + h.len) {
                memmove(dst, src, (size_t)h.len);
            } else {
                memcpy(dst, src, (size_t)h.len);
            }
        }
        pl->placed[1] = 1;
        pl->placed_seg[1] = h.map->id;
        pl->placed_off[1] = h.off;
    }
    ps__shm_map_unref(h.map);
}

typedef struct {
    ps__shm_chan_t *ch;
    plan_t *pl;
} place_ctx_t;

/* With the segment registry locked: the peer gets the segment (once) and
 * the request names it. */
static ps_status_t name_place(const ps__shm_seg_t *seg, uint64_t off, void *arg)
{
    place_ctx_t *c = arg;
    if (ps__shm_idmap_get(&c->ch->announced, seg->id) == NULL) {
        ps_status_t st = ps__shm_announce(c->ch, seg->id, seg->size, seg->fd);
        if (st == PS_OK) {
            st = ps__shm_idmap_put(&c->ch->announced, seg->id, (void *)1);
        }
        if (st != PS_OK) {
            return st;
        }
    }
    c->pl->has_place = 1;
    c->pl->place_seg = seg->id;
    c->pl->place_off = off;
    return PS_OK;
}

/* A pull request whose destination (meta.addr, val_len) is a buffer of
 * ps_shm_buf_alloc() names it, so that the answer can be written there
 * (tx_lock held: announcements are the channel's). */
static void name_destination(ps__shm_chan_t *ch, const ps_msg_t *msg, plan_t *pl)
{
    pl->has_place = 0;
    if (!msg->meta.request || !msg->meta.pull || msg->meta.addr == 0 ||
        msg->meta.val_len <= PS__SHM_INLINE_MAX || pl->meta_streamed || !ch->van->allow_seg) {
        return;
    }
    place_ctx_t c = {.ch = ch, .pl = pl};
    pl->place_len = msg->meta.val_len;
    (void)ps__shm_seg_with_addr(msg->meta.addr, msg->meta.val_len, name_place, &c);
}

ps_status_t ps__shm_send(ps_van_t *v, const ps_msg_t *msg)
{
    ps__shm_van_t *van = ps__shm_of(v);
    ps_status_t prep = ps_van_send_prepare(&van->base, msg, 0, NULL, NULL);
    if (prep != PS_OK) {
        return prep;
    }
    int recver = msg->meta.recver;
    uint64_t total = ps_msg_data_bytes(msg);
    if (total > van->max_message) {
        ps_error(PS_LOG_SHM, "send: %llu data bytes are over the limit (%llu, PS_MAX_MESSAGE_BYTES)",
                 (unsigned long long)total, (unsigned long long)van->max_message);
        return PS_ERR_TOO_LARGE;
    }
    plan_t pl;
    uint8_t stack[META_STACK];
    uint8_t *heap = NULL;
    ps_status_t st = encode_meta(van, msg, stack, sizeof(stack), &pl, &heap);
    if (st != PS_OK) {
        return st;
    }
    ps__shm_chan_t *ch = ps__shm_peer_send_chan(van, recver);
    if (ch == NULL) {
        free(heap);
        return ps_van_unconnected(&van->base, recver, ps_van_peer_table_lost(&van->sock.peers, recver));
    }

    ps_slice_t staged[PS_MSG_MAX_DATA];
    place_answer(van, msg, &pl);
    stage_segments(ch, msg, &pl, staged);

    int bell = 0;
    pthread_mutex_lock(&ch->tx_lock);
    if (ch->state != PS__SHM_CH_READY) {
        pthread_mutex_unlock(&ch->tx_lock);
        unref_staged(staged, msg->num_data);
        ps__shm_chan_unref(ch);
        free(heap);
        return PS_ERR_PEER_GONE;
    }
    name_destination(ch, msg, &pl);
    st = plan_segments(ch, msg, staged, &pl);
    if (st != PS_OK) {
        pthread_mutex_unlock(&ch->tx_lock);
        unref_staged(staged, msg->num_data);
        ps__shm_chan_unref(ch);
        free(heap);
        return st;
    }
    uint8_t *p = ch->sq_head == NULL ? ps__shm_ring_reserve(&ch->tx, pl.rec_len) : NULL;
    ps__shm_entry_t *e = NULL;
    if (p != NULL) {
        /* The common case: the record (and any stream) straight into the
         * ring. */
        write_record(&pl, msg, p);
        uint32_t cur = 0;
        uint64_t off = 0;
        if (!write_parts(&ch->tx, pl.parts, pl.num_parts, &cur, &off)) {
            e = entry_of_plan(&pl, msg, 1, cur, off, &heap);
            if (e == NULL) {
                /* Half a message is in the ring and the rest cannot be
                 * kept: the channel is unusable. Shutting the socket down
                 * makes both progress threads close it and report. */
                shutdown(ch->fd, SHUT_RDWR);
                st = PS_ERR_NO_MEMORY;
            }
        }
        bell = ps__shm_ring_commit(&ch->tx);
    } else {
        e = entry_of_plan(&pl, msg, 0, 0, 0, &heap);
        if (e == NULL) {
            /* The record never went out; its tokens must not stay out. */
            for (uint32_t i = 0; i < pl.num_seg; ++i) {
                ps_slice_t s;
                if ((pl.desc[i].kind == PS__SHM_SEG_SEG || pl.desc[i].kind == PS__SHM_SEG_CMA) &&
                    token_take(ch, pl.desc[i].token, &s)) {
                    ps_slice_unref(&s);
                }
            }
            st = PS_ERR_NO_MEMORY;
        }
    }
    if (e != NULL) {
        enqueue(ch, e);
        kick_flush(ch);
    }
    if (st == PS_OK) {
        for (uint32_t i = 0; i < pl.num_seg; ++i) {
            int k = pl.desc[i].kind == PS__SHM_SEG_SEG && staged[i].buf != NULL ? 0 : pl.desc[i].kind;
            __atomic_add_fetch(&van->sent_by_kind[k], 1, __ATOMIC_RELAXED);
        }
    }
    if (bell) {
        ps__shm_bell(ch);
    }
    pthread_mutex_unlock(&ch->tx_lock);
    /* The tokens hold what the peer still needs. */
    unref_staged(staged, msg->num_data);
    free(heap);
    if (st == PS_OK) {
        __atomic_add_fetch(&van->base.bytes_sent, total + pl.meta_len, __ATOMIC_RELAXED);
        if (ps_unlikely(PS_LOG_TRACE <= ps__log_level)) {
            char line[192];
            ps_msg_describe(msg, line, sizeof(line));
            ps_trace(PS_LOG_SHM, "sent %s", line);
        }
    } else {
        ps_error(PS_LOG_SHM, "out of memory queueing a send to node %d", recver);
    }
    ps__shm_chan_unref(ch);
    return st;
}

ps_status_t ps__shm_send_id(ps__shm_chan_t *ch, int node_id)
{
    ps__shm_rec_id_t r;
    memset(&r, 0, sizeof(r));
    r.hdr.len = sizeof(r);
    r.hdr.type = PS__SHM_REC_ID;
    r.node_id = node_id;
    ps_status_t st = PS_OK;
    pthread_mutex_lock(&ch->tx_lock);
    if (ch->state != PS__SHM_CH_READY) {
        st = PS_ERR_PEER_GONE;
    } else {
        uint8_t *p = ch->sq_head == NULL ? ps__shm_ring_reserve(&ch->tx, sizeof(r)) : NULL;
        if (p != NULL) {
            memcpy(p, &r, sizeof(r));
            if (ps__shm_ring_commit(&ch->tx)) {
                ps__shm_bell(ch);
            }
        } else {
            ps__shm_entry_t *e = calloc(1, sizeof(*e));
            if (e != NULL) {
                e->rec = malloc(sizeof(r));
            }
            if (e == NULL || e->rec == NULL) {
                free(e);
                st = PS_ERR_NO_MEMORY;
            } else {
                memcpy(e->rec, &r, sizeof(r));
                e->rec_len = sizeof(r);
                enqueue(ch, e);
                kick_flush(ch);
            }
        }
    }
    pthread_mutex_unlock(&ch->tx_lock);
    return st;
}

/* ---- acks ---- */

void ps__shm_ack_later(ps__shm_chan_t *ch, uint32_t token)
{
    pthread_mutex_lock(&ch->ack_lock);
    if (ch->acks_closed) {
        pthread_mutex_unlock(&ch->ack_lock);
        return;
    }
    if (ch->nacks == ch->ack_cap) {
        size_t cap = ch->ack_cap ? ch->ack_cap * 2 : 64;
        uint32_t *a = realloc(ch->acks, cap * sizeof(*a));
        if (a == NULL) {
            /* The peer keeps the buffer a little longer; nothing breaks. */
            pthread_mutex_unlock(&ch->ack_lock);
            ps_warn_ratelimited(PS_LOG_SHM, "out of memory queueing an ack to node %d",
                                ch->peer_id);
            return;
        }
        ch->acks = a;
        ch->ack_cap = cap;
    }
    ch->acks[ch->nacks] = token;
    __atomic_store_n(&ch->nacks, ch->nacks + 1, __ATOMIC_RELEASE);
    if (!ps__shm_on_progress(ch->van)) {
        /* Under ack_lock: the van cannot go away meanwhile (close marks
         * every channel's acks closed first). */
        __atomic_store_n(&ch->van->ack_kick, 1, __ATOMIC_SEQ_CST);
        ps__shm_wake(ch->van);
    }
    pthread_mutex_unlock(&ch->ack_lock);
}

/* Writes ACK records for the acks waiting (tx_lock held); 1 if all went. */
static int write_acks(ps__shm_chan_t *ch, int *moved_p)
{
    uint32_t buf[ACK_BATCH];
    for (;;) {
        pthread_mutex_lock(&ch->ack_lock);
        size_t n = ch->nacks < ACK_BATCH ? ch->nacks : ACK_BATCH;
        if (n != 0) {
            memcpy(buf, ch->acks, n * sizeof(buf[0]));
        }
        pthread_mutex_unlock(&ch->ack_lock);
        if (n == 0) {
            return 1;
        }
        uint32_t len = ps__shm_align8(sizeof(ps__shm_rec_ack_t) + n * sizeof(uint32_t));
        uint8_t *p = ps__shm_ring_reserve(&ch->tx, len);
        if (p == NULL) {
            return 0;
        }
        ps__shm_rec_ack_t a;
        memset(&a, 0, sizeof(a));
        a.hdr.len = len;
        a.hdr.type = PS__SHM_REC_ACK;
        a.count = (uint32_t)n;
        memcpy(p, &a, sizeof(a));
        memcpy(p + sizeof(a), buf, n * sizeof(buf[0]));
        (*moved_p)++;
        /* Others may have appended meanwhile: drop the first n. */
        pthread_mutex_lock(&ch->ack_lock);
        memmove(ch->acks, ch->acks + n, (ch->nacks - n) * sizeof(buf[0]));
        __atomic_store_n(&ch->nacks, ch->nacks - n, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&ch->ack_lock);
    }
}

int ps__shm_flush(ps__shm_chan_t *ch)
{
    int moved = 0;
    ps__shm_entry_t *done = NULL;
    pthread_mutex_lock(&ch->tx_lock);
    if (ch->state != PS__SHM_CH_READY) {
        __atomic_store_n(&ch->want_flush, 0, __ATOMIC_RELAXED);
        pthread_mutex_unlock(&ch->tx_lock);
        return 0;
    }
    for (;;) {
        uint32_t need = 0;
        if (!write_acks(ch, &moved)) {
            need = (uint32_t)sizeof(ps__shm_rec_ack_t) + 8;
        }
        while (need == 0 && ch->sq_head != NULL) {
            ps__shm_entry_t *e = ch->sq_head;
            if (e->rec != NULL) {
                uint8_t *p = ps__shm_ring_reserve(&ch->tx, e->rec_len);
                if (p == NULL) {
                    need = e->rec_len;
                    break;
                }
                memcpy(p, e->rec, e->rec_len);
                free(e->rec);
                e->rec = NULL;
                moved++;
            }
            if (!write_parts(&ch->tx, e->parts, e->num_parts, &e->cur, &e->off)) {
                need = ps__shm_align8(sizeof(ps__shm_rec_chunk_t) + PS__SHM_CHUNK_MIN);
                moved++;
                break;
            }
            ch->sq_head = e->next;
            if (ch->sq_head == NULL) {
                ch->sq_tail = NULL;
            }
            e->next = done;
            done = e;
            moved++;
        }
        if (need == 0) {
            __atomic_store_n(&ch->tx_blocked, 0, __ATOMIC_RELAXED);
            __atomic_store_n(&ch->want_flush, 0, __ATOMIC_RELAXED);
            break;
        }
        /* Full: say we wait (the peer rings our bell when it makes room),
         * unless room appeared meanwhile. */
        if (!ps__shm_ring_wait_room(&ch->tx, need)) {
            __atomic_store_n(&ch->tx_blocked, 1, __ATOMIC_RELAXED);
            __atomic_store_n(&ch->want_flush, 0, __ATOMIC_RELAXED);
            break;
        }
    }
    if (moved != 0 && ps__shm_ring_commit(&ch->tx)) {
        ps__shm_bell(ch);
    }
    pthread_mutex_unlock(&ch->tx_lock);
    entries_free(done);
    return moved;
}

void ps__shm_tx_drop(ps__shm_chan_t *ch)
{
    pthread_mutex_lock(&ch->tx_lock);
    ps__shm_entry_t *queue = ch->sq_head;
    ch->sq_head = ch->sq_tail = NULL;
    ps__shm_token_t *tokens = ch->tokens;
    uint32_t cap = ch->tok_cap;
    ch->tokens = NULL;
    ch->tok_cap = 0;
    ch->tok_free = UINT32_MAX;
    ch->tok_live = 0;
    pthread_mutex_unlock(&ch->tx_lock);
    entries_free(queue);
    for (uint32_t i = 0; i < cap; ++i) {
        ps_slice_unref(&tokens[i].slice);
    }
    free(tokens);
}
