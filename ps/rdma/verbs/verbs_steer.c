/*
 * The receiver's side of steering (verbs_rdv.h): where a request's segment
 * goes before it is written, asked of recv_buffer with what a START says
 * of the message; whether a re-grant may offer that region again; and how
 * a segment that was written there is handed over.
 *
 * recv_buffer is asked with a meta that holds the sender the connection
 * proved, app and customer ids, key, request, push and is_tensor, nothing
 * else: the hooks that steer requests (the KV and AF servers' registered
 * buffers) answer from those. Responses are never steered.
 */
#include <string.h>

#include "ps/base/log.h"
#include "ps/net/van/rx.h"
#include "ps/rdma/common/memcheck.h"
#include "ps/rdma/verbs/verbs_internal.h"

/* The meta recv_buffer is asked with for a request of `peer`. */
static void steer_meta(int peer, const ps__vb_ctrl_t *c, ps_meta_t *m)
{
    ps_meta_init(m);
    m->sender = peer;
    m->app_id = c->app_id;
    m->customer_id = c->customer_id;
    m->key = c->key;
    m->request = (c->dir & PS__VB_DIR_REQUEST) != 0;
    m->push = (c->dir & PS__VB_DIR_PUSH) != 0;
    m->is_tensor = c->is_tensor != 0;
}

int ps__vb_steer_find(ps__vb_van_t *van, ps__vb_conn_t *conn, const ps__vb_ctrl_t *start,
                      ps__vb_steer_t *steer_p)
{
    int peer = __atomic_load_n(&conn->peer_id, __ATOMIC_ACQUIRE);
    if (!(start->flags & PS__VB_RDV_STEER) || !(start->dir & PS__VB_DIR_REQUEST) ||
        van->base.cb.recv_buffer == NULL || peer == PS_NODE_EMPTY || conn->dev == NULL)
        return 0;
    ps_meta_t m;
    steer_meta(peer, start, &m);
    for (unsigned i = 0; i < start->num_data; i++) {
        if (start->seg_len[i] == 0)
            continue;
        ps_slice_t dest = PS_SLICE_EMPTY_INIT;
        /* Device memory too: the NIC writes it when it can be registered. */
        if (ps_van_recv_dest(&van->base, &m, i, start->seg_len[i], PS_VAN_DEVICE_ANY, &dest) !=
            PS_OK)
            continue;
        ps_rdma_mr_t *mr = NULL;
        if (ps_rdma_mr_cache_get(conn->dev->mrc, &dest, &mr) != PS_OK) {
            /* Logged by the cache; the segment lands in the grant. */
            ps_slice_unref(&dest);
            return 0;
        }
        steer_p->seg = i;
        steer_p->dest = dest;
        steer_p->rkey = ps__vb_mr_rkey(mr->handle);
        steer_p->handle = mr;
        return 1;
    }
    return 0;
}

void ps__vb_steer_release(void *dev, void *handle)
{
    ps__vb_dev_t *d = dev;
    if (handle != NULL)
        ps_rdma_mr_cache_put(d->mrc, handle);
}

int ps__vb_steer_still_named(ps__vb_van_t *van, ps__vb_conn_t *conn, const ps__vb_ctrl_t *regrant)
{
    int peer = __atomic_load_n(&conn->peer_id, __ATOMIC_ACQUIRE);
    if (van->base.cb.recv_buffer == NULL || peer == PS_NODE_EMPTY)
        return 0;
    ps_meta_t m;
    steer_meta(peer, regrant, &m);
    ps_slice_t dest = PS_SLICE_EMPTY_INIT;
    if (ps_van_recv_dest(&van->base, &m, regrant->steer_seg, regrant->steer_len,
                         PS_VAN_DEVICE_ANY, &dest) != PS_OK)
        return 0;
    int same = (uint64_t)(uintptr_t)ps_slice_ptr(&dest) == regrant->steer_addr;
    ps_slice_unref(&dest);
    return same;
}

ps_status_t ps__vb_steer_land(ps__vb_van_t *van, const ps_meta_t *meta, unsigned index,
                              const ps_slice_t *region, uint64_t len, ps_slice_t *seg_p)
{
    int host = ps_slice_in_host_mem(region);
    if (host)
        PS_RDMA_DEVICE_WROTE(ps_slice_ptr(region), len);
    ps_slice_t dest = PS_SLICE_EMPTY_INIT;
    if (ps_van_recv_dest(&van->base, meta, index, len, PS_VAN_DEVICE_ANY, &dest) == PS_OK) {
        if (ps_slice_ptr(&dest) == ps_slice_ptr(region)) {
            __atomic_add_fetch(&van->received_in_place, 1, __ATOMIC_RELAXED);
            *seg_p = dest;
            return PS_OK;
        }
        /* The application names another buffer now (it registered anew
         * since the grant was made): the bytes move there. */
        if (host && ps_slice_in_host_mem(&dest)) {
            memcpy(ps_slice_ptr(&dest), ps_slice_ptr(region), (size_t)len);
            *seg_p = dest;
            return PS_OK;
        }
        ps_slice_unref(&dest);
    }
    return ps_slice_sub(region, 0, (size_t)len, seg_p);
}
