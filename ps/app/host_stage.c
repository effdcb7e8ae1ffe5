/*
 * Device memory through a host-only van: one copy each way (host_stage.h).
 */
#include "ps/app/host_stage.h"

#include "ps/gpu/mem.h"
#include "ps/gpu/stage_pool.h"

ps_status_t ps__app_sendable(const ps_slice_t *src, int device_ok, ps_slice_t *out_p)
{
    if (device_ok || src->len == 0 || ps_slice_in_host_mem(src)) {
        *out_p = ps_slice_ref(src);
        return PS_OK;
    }
    ps_slice_t host;
    ps_mem_kind_t kind = ps_slice_mem_ops_kind(src);
    ps_status_t st = ps_stage_pool_get(kind, src->len, &host);
    if (st != PS_OK) {
        return st;
    }
    st = ps_mem_ops(kind)->copy_to_host(ps_slice_ptr(&host), ps_slice_ptr(src), src->len);
    if (st != PS_OK) {
        ps_slice_unref(&host);
        return st;
    }
    *out_p = host;
    return PS_OK;
}

ps_status_t ps__app_receive_stage(const ps_slice_t *dest, ps_slice_t *out_p)
{
    return ps_stage_pool_get(ps_slice_mem_ops_kind(dest), dest->len, out_p);
}

ps_status_t ps__app_copy_in(const ps_slice_t *dest, size_t off, const void *src, size_t len)
{
    if (off > dest->len || len > dest->len - off) {
        return PS_ERR_INVALID_ARG;
    }
    if (len == 0 || ps_slice_in_host_mem(dest)) {
        return ps_slice_copy_in(dest, off, src, len);
    }
    return ps_mem_ops(ps_slice_mem_ops_kind(dest))->copy_from_host((char *)ps_slice_ptr(dest) + off, src, len);
}
