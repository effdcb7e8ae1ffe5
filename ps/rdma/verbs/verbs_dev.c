/*
 * Device contexts of the ibverbs van and the "is there an RDMA device at
 * all" probe.
 *
 * One context per RDMA device the van meets (through rdmacm: the listener's
 * bound address or a connection's route): a protection domain, one
 * completion channel and one CQ for every QP on the device, one shared
 * receive queue (SRQ) holding BYTEPS_RDMA_RX_DEPTH posted 4 KiB buffers,
 * the registration cache (PS_MR_CACHE_BYTES, default half of `ulimit -l`),
 * the registered buffer pool those buffers and grants come from, and the
 * grant table. Upstream posted rx_depth buffers per endpoint and registered
 * each small context buffer separately — thousands of MRs growing with
 * peers x depth, the source of "ibv_reg_mr failed: Cannot allocate memory"
 * (byteps #313); here receive memory is per device and registered in pool
 * blocks.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps/base/log.h"
#include "ps/rdma/probe.h"
#include "ps/rdma/verbs/verbs_cq.h"
#include "ps/rdma/verbs/verbs_internal.h"

/* ---- availability ---- */

static pthread_once_t g_probe_once = PTHREAD_ONCE_INIT;
static char g_unavailable[256];

/* Long device reasons are cut to fit; the start is what matters. */
static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_unavailable, sizeof(g_unavailable), fmt, ap);
    va_end(ap);
}

static void probe_once(void)
{
    char why[200];
    if (ps__rdmacm_dl_load(why, sizeof(why)) != PS_OK) {
        say("van unavailable: %s", why);
        return;
    }
    ps_probe_ibverbs_t *ib = calloc(1, sizeof(*ib));
    ps_probe_rdmacm_t cm;
    if (ib == NULL) {
        say("no RDMA device: cannot probe (out of memory)");
        return;
    }
    ps_probe_ibverbs(ib);
    if (!ib->available) {
        /* The probe's reason starts "no ibverbs devices: "; say it once. */
        const char *r = ib->reason;
        const char *prefix = "no ibverbs devices: ";
        if (strncmp(r, prefix, strlen(prefix)) == 0)
            r += strlen(prefix);
        say("no RDMA device: ibverbs lists none (%s); needed: an RDMA NIC with its driver, or "
            "soft-RoCE (rdma link add rxe0 type rxe netdev <interface>)", r);
        free(ib);
        return;
    }
    int opened = 0;
    for (int i = 0; i < ib->device_count; i++)
        opened |= ib->devices[i].opened;
    if (!opened) {
        say("no RDMA device: %s cannot be opened (%s)", ib->devices[0].name,
            ib->devices[0].reason);
        free(ib);
        return;
    }
    free(ib);
    ps_probe_rdmacm(&cm);
    if (!cm.available)
        say("no RDMA device: the rdma_cm service is unavailable (%s; load rdma_ucm)", cm.reason);
}

int ps__vb_unavailable(char *why, size_t cap)
{
    pthread_once(&g_probe_once, probe_once);
    if (g_unavailable[0] == '\0')
        return 0;
    if (why != NULL && cap > 0)
        snprintf(why, cap, "%s", g_unavailable);
    return 1;
}

/* ---- buffers and keys ---- */

ps_status_t ps__vb_pool_get(ps__vb_dev_t *dev, size_t len, ps_slice_t *slice_p, uint32_t *lkey_p)
{
    ps_slice_t s = PS_SLICE_EMPTY_INIT;
    ps_status_t st = ps_rdma_buf_pool_get(dev->pool, len, &s);
    if (st != PS_OK)
        return st;
    void *h = ps_rdma_buf_pool_handle(dev->pool, &s);
    if (h == NULL) {
        ps_slice_unref(&s);
        return PS_ERR_REGISTRATION;
    }
    *slice_p = s;
    if (lkey_p != NULL)
        *lkey_p = ps__vb_mr_lkey(h);
    return PS_OK;
}

ps_status_t ps__vb_slice_lkey(ps__vb_dev_t *dev, const ps_slice_t *slice, uint32_t *lkey_p,
                              ps_rdma_mr_t **mr_p)
{
    void *h = ps_rdma_buf_pool_handle(dev->pool, slice);
    if (h != NULL) {
        *lkey_p = ps__vb_mr_lkey(h);
        *mr_p = NULL;
        return PS_OK;
    }
    ps_rdma_mr_t *mr = NULL;
    ps_status_t st = ps_rdma_mr_cache_get(dev->mrc, slice, &mr);
    if (st != PS_OK)
        return st;
    *lkey_p = ps__vb_mr_lkey(mr->handle);
    *mr_p = mr;
    return PS_OK;
}

ps_status_t ps__vb_rx_post(ps__vb_dev_t *dev, ps__vb_rx_t *rx, int fresh)
{
    if (fresh || rx->buf.buf == NULL) {
        ps_slice_unref(&rx->buf);
        ps_status_t st = ps__vb_pool_get(dev, PS__VB_RX_BLOCK, &rx->buf, &rx->lkey);
        if (st != PS_OK) {
            dev->rx_missing++;
            ps_warn_ratelimited(PS_LOG_RDMA, "%s: no memory for a receive buffer (%s); the "
                                "shared receive queue runs short", dev->name, ps_status_str(st));
            return st;
        }
    }
    struct ibv_sge sge = {
        .addr = (uint64_t)(uintptr_t)ps_slice_ptr(&rx->buf),
        .length = PS__VB_RX_BLOCK,
        .lkey = rx->lkey,
    };
    struct ibv_recv_wr wr, *bad = NULL;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = (uint64_t)(uintptr_t)&rx->wr;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    int rc = ibv_post_srq_recv(dev->srq, &wr, &bad);
    if (rc != 0) {
        ps_warn_ratelimited(PS_LOG_RDMA, "%s: ibv_post_srq_recv: %s", dev->name, strerror(rc));
        dev->rx_missing++;
        ps_slice_unref(&rx->buf);
        return PS_ERR_DEVICE;
    }
    return PS_OK;
}

/* ---- grants' memory ---- */

static ps_status_t grant_alloc(void *ctx, size_t len, ps_slice_t *slice_p, uint32_t *rkey_p)
{
    ps__vb_dev_t *dev = ctx;
    ps_slice_t s = PS_SLICE_EMPTY_INIT;
    ps_status_t st = ps_rdma_buf_pool_get(dev->pool, len, &s);
    if (st != PS_OK)
        return st;
    void *h = ps_rdma_buf_pool_handle(dev->pool, &s);
    if (h == NULL) {
        ps_slice_unref(&s);
        return PS_ERR_REGISTRATION;
    }
    *slice_p = s;
    *rkey_p = ps__vb_mr_rkey(h);
    return PS_OK;
}

static void grant_notify(void *ctx)
{
    ps__vb_dev_t *dev = ctx;
    ps__vb_poll_wake(dev->van);
}

/* ---- device contexts ---- */

static void dev_free(ps__vb_dev_t *dev)
{
    if (dev->srq != NULL && ibv_destroy_srq(dev->srq) != 0)
        ps_warn(PS_LOG_RDMA, "%s: ibv_destroy_srq: %m", dev->name);
    if (dev->rx != NULL) {
        for (uint32_t i = 0; i < dev->srq_depth; i++)
            ps_slice_unref(&dev->rx[i].buf);
        free(dev->rx);
    }
    if (dev->cq != NULL) {
        if (dev->cq_unacked > 0)
            ibv_ack_cq_events(dev->cq, dev->cq_unacked);
        if (ibv_destroy_cq(dev->cq) != 0)
            ps_warn(PS_LOG_RDMA, "%s: ibv_destroy_cq: %m", dev->name);
    }
    if (dev->channel != NULL && ibv_destroy_comp_channel(dev->channel) != 0)
        ps_warn(PS_LOG_RDMA, "%s: ibv_destroy_comp_channel: %m", dev->name);
    if (dev->grants != NULL)
        ps__vb_grants_close(dev->grants);
    if (dev->mrc != NULL)
        ps_rdma_mr_cache_destroy(dev->mrc);
    if (dev->pool != NULL)
        ps_rdma_buf_pool_destroy(dev->pool);
    if (dev->pd != NULL && ibv_dealloc_pd(dev->pd) != 0)
        ps_warn(PS_LOG_RDMA, "%s: ibv_dealloc_pd: %m (memory still registered)", dev->name);
    if (dev->reg_inited)
        ps__vb_reg_ctx_cleanup(&dev->reg);
    free(dev);
}

static ps_status_t dev_create(ps__vb_van_t *van, struct ibv_context *ctx, ps__vb_dev_t **dev_p)
{
    ps__vb_dev_t *dev = calloc(1, sizeof(*dev));
    if (dev == NULL)
        return PS_ERR_NO_MEMORY;
    dev->van = van;
    dev->ctx = ctx;
    snprintf(dev->name, sizeof(dev->name), "%s", ibv_get_device_name(ctx->device));
    ps_status_t st = PS_ERR_DEVICE;
    int rc = ibv_query_device(ctx, &dev->attr);
    if (rc != 0) {
        ps_error(PS_LOG_RDMA, "%s: ibv_query_device: %s", dev->name, strerror(rc));
        goto fail;
    }
    /* The CM thread drains async events without blocking. */
    int afl = fcntl(ctx->async_fd, F_GETFL);
    if (afl < 0 || fcntl(ctx->async_fd, F_SETFL, afl | O_NONBLOCK) != 0) {
        ps_error(PS_LOG_RDMA, "%s: cannot make the async event fd non-blocking: %m", dev->name);
        goto fail;
    }
    dev->pd = ibv_alloc_pd(ctx);
    if (dev->pd == NULL) {
        ps_error(PS_LOG_RDMA, "%s: ibv_alloc_pd: %m", dev->name);
        goto fail;
    }
    if ((st = ps__vb_reg_ctx_init(&dev->reg, dev->pd, dev->name, dev->attr.max_mr_size)) != PS_OK)
        goto fail;
    dev->reg_inited = 1;

    ps_rdma_mr_cache_params_t mp;
    memset(&mp, 0, sizeof(mp));
    mp.name = "ibverbs";
    mp.log = PS_LOG_RDMA;
    mp.max_bytes = ps_rdma_mr_cache_default_limit(1);
    if ((st = ps_rdma_mr_cache_create(&mp, &ps__vb_reg_ops, &dev->reg, &dev->mrc)) != PS_OK)
        goto fail;
    if ((st = ps_rdma_buf_pool_create("ibverbs", &ps__vb_reg_ops, &dev->reg, 0, 0, &dev->pool)) !=
        PS_OK)
        goto fail;

    st = PS_ERR_DEVICE;
    dev->channel = ibv_create_comp_channel(ctx);
    if (dev->channel == NULL) {
        ps_error(PS_LOG_RDMA, "%s: ibv_create_comp_channel: %m", dev->name);
        goto fail;
    }
    int fl = fcntl(dev->channel->fd, F_GETFL);
    if (fl < 0 || fcntl(dev->channel->fd, F_SETFL, fl | O_NONBLOCK) != 0) {
        ps_error(PS_LOG_RDMA, "%s: cannot make the completion channel non-blocking: %m",
                 dev->name);
        goto fail;
    }

    dev->srq_depth = van->rx_depth;
    if (dev->attr.max_srq_wr > 0 && dev->srq_depth > (uint32_t)dev->attr.max_srq_wr)
        dev->srq_depth = (uint32_t)dev->attr.max_srq_wr;
    /* Room for every posted receive plus the signaled sends in flight
     * (BYTEPS_RDMA_MAX_CONCURR_WR), which ps__vb_post counts against cq_room. */
    if (ps__vb_cq_plan(dev->srq_depth, van->cq_sends, dev->attr.max_cqe, &dev->cq_size,
                       &dev->cq_room) != PS_OK) {
        ps_error(PS_LOG_RDMA, "%s: a CQ of at most %d entries leaves room for fewer than %d "
                 "sends beside %u receives (lower BYTEPS_RDMA_RX_DEPTH)", dev->name,
                 dev->attr.max_cqe, PS__VB_CQ_MIN_SENDS, dev->srq_depth);
        st = PS_ERR_CONFIG;
        goto fail;
    }
    dev->cq = ibv_create_cq(ctx, dev->cq_size, dev, dev->channel, 0);
    if (dev->cq == NULL) {
        ps_error(PS_LOG_RDMA, "%s: ibv_create_cq of %d entries: %m", dev->name, dev->cq_size);
        goto fail;
    }
    if ((rc = ibv_req_notify_cq(dev->cq, 0)) != 0) {
        ps_error(PS_LOG_RDMA, "%s: ibv_req_notify_cq: %s", dev->name, strerror(rc));
        goto fail;
    }

    struct ibv_srq_init_attr sa;
    memset(&sa, 0, sizeof(sa));
    sa.srq_context = dev;
    sa.attr.max_wr = dev->srq_depth;
    sa.attr.max_sge = 1;
    dev->srq = ibv_create_srq(dev->pd, &sa);
    if (dev->srq == NULL) {
        ps_error(PS_LOG_RDMA, "%s: ibv_create_srq of %u entries: %m", dev->name, dev->srq_depth);
        goto fail;
    }
    dev->rx = calloc(dev->srq_depth, sizeof(*dev->rx));
    if (dev->rx == NULL) {
        st = PS_ERR_NO_MEMORY;
        goto fail;
    }
    for (uint32_t i = 0; i < dev->srq_depth; i++) {
        dev->rx[i].wr.kind = PS__VB_WR_RX;
        dev->rx[i].dev = dev;
        if ((st = ps__vb_rx_post(dev, &dev->rx[i], 1)) != PS_OK) {
            ps_error(PS_LOG_RDMA, "%s: cannot post %u receive buffers of %u bytes (%s); lower "
                     "BYTEPS_RDMA_RX_DEPTH or raise `ulimit -l`", dev->name, dev->srq_depth,
                     PS__VB_RX_BLOCK, ps_status_str(st));
            goto fail;
        }
    }
    dev->rx_posted = dev->srq_depth;

    ps__vb_grants_params_t gp;
    memset(&gp, 0, sizeof(gp));
    gp.max_slots = van->pool_slots;
    gp.max_cached_bytes = PS__VB_GRANT_CACHE_BYTES;
    gp.max_meta_len = van->limits.max_meta_bytes + PS_FRAME_MAX_HEADER_LEN + 64;
    gp.max_data_len = van->limits.max_message_bytes;
    ps__vb_grants_ops_t go = {grant_alloc, grant_notify, dev, ps__vb_steer_release};
    if ((st = ps__vb_grants_create(&gp, &go, &dev->grants)) != PS_OK)
        goto fail;

    dev->max_sge = dev->attr.max_sge < PS__VB_MAX_SGE ? (uint32_t)dev->attr.max_sge
                                                      : PS__VB_MAX_SGE;
    if (dev->max_sge < 2) {
        ps_error(PS_LOG_RDMA, "%s offers %d scatter-gather entries per WR; the van needs 2",
                 dev->name, dev->attr.max_sge);
        st = PS_ERR_UNSUPPORTED;
        goto fail;
    }
    *dev_p = dev;
    return PS_OK;

fail:
    /* QPs never existed on it: the SRQ's buffers are simply freed. */
    dev_free(dev);
    return st == PS_OK ? PS_ERR_DEVICE : st;
}

ps_status_t ps__vb_dev_get(ps__vb_van_t *van, struct ibv_context *ctx, ps__vb_dev_t **dev_p)
{
    if (ctx == NULL)
        return PS_ERR_INVALID_ARG;
    ps_mutex_lock(&van->lock);
    int n = van->ndevs;
    for (int i = 0; i < n; i++) {
        if (van->devs[i]->ctx == ctx) {
            *dev_p = van->devs[i];
            ps_mutex_unlock(&van->lock);
            return PS_OK;
        }
    }
    if (n == PS__VB_MAX_DEVS) {
        ps_mutex_unlock(&van->lock);
        ps_error(PS_LOG_RDMA, "more than %d RDMA devices in use by one van", PS__VB_MAX_DEVS);
        return PS_ERR_NO_RESOURCE;
    }
    ps__vb_dev_t *dev = NULL;
    ps_status_t st = dev_create(van, ctx, &dev);
    if (st == PS_OK) {
        st = ps__vb_poll_add_dev(van, dev);
        if (st != PS_OK) {
            dev_free(dev);
        } else {
            van->devs[n] = dev;
            __atomic_store_n(&van->ndevs, n + 1, __ATOMIC_RELEASE);
            ps_info(PS_LOG_RDMA, "%s: %u shared receive buffers of %u bytes, CQ of %d entries, "
                    "registration cache limit %llu bytes", dev->name, dev->srq_depth,
                    PS__VB_RX_BLOCK, dev->cq_size,
                    (unsigned long long)ps_rdma_mr_cache_default_limit(1));
            *dev_p = dev;
        }
    }
    ps_mutex_unlock(&van->lock);
    return st;
}

void ps__vb_dev_destroy_all(ps__vb_van_t *van)
{
    int n = __atomic_load_n(&van->ndevs, __ATOMIC_ACQUIRE);
    ps__vb_grants_stats_t sum;
    memset(&sum, 0, sizeof(sum));
    for (int i = 0; i < n; i++) {
        ps__vb_grants_stats_t gs;
        ps__vb_grants_stats(van->devs[i]->grants, &gs);
        sum.starts += gs.starts;
        sum.steered += gs.steered;
        sum.regrants += gs.regrants;
        sum.reuses += gs.reuses;
    }
    if (n > 0)
        ps_info(PS_LOG_RDMA, "ibverbs van closes: %llu rendezvous grants made (%llu into "
                "application buffers), %llu re-granted, %llu reused; %lu segments received in "
                "place", (unsigned long long)sum.starts, (unsigned long long)sum.steered,
                (unsigned long long)sum.regrants, (unsigned long long)sum.reuses,
                __atomic_load_n(&van->received_in_place, __ATOMIC_RELAXED));
    for (int i = 0; i < n; i++) {
        dev_free(van->devs[i]);
        van->devs[i] = NULL;
    }
    __atomic_store_n(&van->ndevs, 0, __ATOMIC_RELEASE);
}
