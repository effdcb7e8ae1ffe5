/* Payload splitting and in-order release (see verbs_split.h). */
#include "ps/rdma/verbs/verbs_split.h"

#include <string.h>

static ps_status_t add_cut(uint8_t qp, uint64_t off, uint64_t len, uint64_t max_wr,
                           ps__vb_chunk_t *chunks, unsigned cap, unsigned *n)
{
    while (len > 0) {
        uint64_t piece = max_wr != 0 && len > max_wr ? max_wr : len;
        if (*n >= cap)
            return PS_ERR_TOO_LARGE;
        chunks[*n].qp = qp;
        chunks[*n].off = off;
        chunks[*n].len = piece;
        (*n)++;
        off += piece;
        len -= piece;
    }
    return PS_OK;
}

ps_status_t ps__vb_split(uint64_t total, unsigned nqp, uint64_t min_split, uint64_t max_wr,
                         ps__vb_chunk_t *chunks, unsigned cap, unsigned *n_p)
{
    if (nqp == 0 || nqp > PS__VB_MAX_QP || n_p == NULL || (chunks == NULL && cap != 0))
        return PS_ERR_INVALID_ARG;
    unsigned n = 0;
    if (total == 0) {
        *n_p = 0;
        return PS_OK;
    }
    if (nqp == 1 || total < min_split || total < nqp) {
        ps_status_t st = add_cut(0, 0, total, max_wr, chunks, cap, &n);
        if (st != PS_OK)
            return st;
        *n_p = n;
        return PS_OK;
    }
    uint64_t share = total / nqp;
    uint64_t first = share + total % nqp;
    ps_status_t st = add_cut(0, 0, first, max_wr, chunks, cap, &n);
    uint64_t off = first;
    for (unsigned k = 1; st == PS_OK && k < nqp; k++) {
        st = add_cut((uint8_t)k, off, share, max_wr, chunks, cap, &n);
        off += share;
    }
    if (st != PS_OK)
        return st;
    *n_p = n;
    return PS_OK;
}

ps_status_t ps__vb_pieces(const uint64_t *lens, unsigned nseg, uint64_t off, uint64_t len,
                          ps__vb_piece_t *pieces, unsigned cap, unsigned *n_p)
{
    if (n_p == NULL || (lens == NULL && nseg != 0) || (pieces == NULL && cap != 0))
        return PS_ERR_INVALID_ARG;
    uint64_t total = 0;
    for (unsigned i = 0; i < nseg; i++) {
        if (total + lens[i] < total)
            return PS_ERR_INVALID_ARG;
        total += lens[i];
    }
    if (off > total || len > total - off)
        return PS_ERR_INVALID_ARG;
    unsigned n = 0;
    uint64_t base = 0;
    uint64_t end = off + len;
    for (unsigned i = 0; i < nseg && off < end; i++) {
        uint64_t seg_end = base + lens[i];
        if (lens[i] != 0 && off < seg_end) {
            uint64_t take = (end < seg_end ? end : seg_end) - off;
            if (n >= cap)
                return PS_ERR_TOO_LARGE;
            pieces[n].seg = (uint8_t)i;
            pieces[n].off = off - base;
            pieces[n].len = take;
            n++;
            off += take;
        }
        base = seg_end;
    }
    *n_p = n;
    return PS_OK;
}

void ps__vb_reorder_init(ps__vb_reorder_t *r, unsigned nqp)
{
    memset(r, 0, sizeof(*r));
    r->nqp = nqp == 0 ? 1 : nqp > PS__VB_MAX_QP ? PS__VB_MAX_QP : nqp;
}

void ps__vb_reorder_push(ps__vb_reorder_t *r, ps__vb_reorder_item_t *item)
{
    item->next = NULL;
    if (r->tail != NULL)
        r->tail->next = item;
    else
        r->head = item;
    r->tail = item;
    r->waiting++;
}

ps_status_t ps__vb_reorder_slave(ps__vb_reorder_t *r, unsigned qp)
{
    if (qp == 0 || qp >= r->nqp)
        return PS_ERR_PROTOCOL;
    r->got[qp]++;
    return PS_OK;
}

static int ready(const ps__vb_reorder_t *r, const ps__vb_reorder_item_t *item)
{
    for (unsigned k = 1; k < r->nqp; k++) {
        /* Counters wrap: "reached" is a non-negative signed distance. */
        if ((int32_t)(r->got[k] - item->need[k]) < 0)
            return 0;
    }
    return 1;
}

ps__vb_reorder_item_t *ps__vb_reorder_pop(ps__vb_reorder_t *r)
{
    ps__vb_reorder_item_t *item = r->head;
    if (item == NULL || !ready(r, item))
        return NULL;
    r->head = item->next;
    if (r->head == NULL)
        r->tail = NULL;
    item->next = NULL;
    r->waiting--;
    return item;
}

void ps__vb_reorder_drain(ps__vb_reorder_t *r, void (*fn)(void *ctx, ps__vb_reorder_item_t *item),
                          void *ctx)
{
    while (r->head != NULL) {
        ps__vb_reorder_item_t *item = r->head;
        r->head = item->next;
        item->next = NULL;
        r->waiting--;
        if (fn != NULL)
            fn(ctx, item);
    }
    r->tail = NULL;
}
