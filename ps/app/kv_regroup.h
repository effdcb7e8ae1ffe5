/*
 * Requests a user slicer (ps_kv_worker_set_slicer) sends to servers out of
 * key order, regrouped: the keys, pushed values and lengths copied so that
 * each server's keys are contiguous (in key order within a server), a pull
 * received into scratch memory in that order and copied back into the
 * caller's destination key by key when the request completes. A slicer
 * that keeps servers in key order needs none of this (no copy).
 *
 * Host memory only: values in device memory are refused.
 */
#ifndef PS_APP_KV_REGROUP_H_
#define PS_APP_KV_REGROUP_H_

#include <stddef.h>

#include "ps/app/kv.h"
#include "ps/base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    size_t num_keys;
    int *owner;          /* per regrouped key: its server, non-decreasing */
    ps_kv_pairs_t push;  /* regrouped copy of the push (empty when none) */
    ps_kv_pairs_t out;   /* the pull's keys and lengths, scratch values */
    /* A pull: per regrouped key, where its bytes go in the caller's
     * destination (offset, length; 2 entries per key). */
    size_t *scatter;
    ps_slice_t dest;     /* the caller's destination, referenced */
} ps__kv_regroup_t;

/* Regroups `push` and/or `out` (the same keys; either may be NULL) by
 * owner[i], the server of key i (0 .. num_servers-1). PS_ERR_INVALID_ARG
 * for device memory or a bad owner. */
ps_status_t ps__kv_regroup(const ps_kv_pairs_t *push, const ps_kv_pairs_t *out, const int *owner,
                           int num_servers, ps__kv_regroup_t *rg);

/* A pull's values: from the scratch memory rg->out.vals into the caller's
 * destination, key by key. */
ps_status_t ps__kv_regroup_scatter(const size_t *scatter, size_t num_keys,
                                   const ps_slice_t *scratch, const ps_slice_t *dest);

/* Frees what ps__kv_regroup made (references dropped). */
void ps__kv_regroup_free(ps__kv_regroup_t *rg);

#ifdef __cplusplus
}
#endif

#endif /* PS_APP_KV_REGROUP_H_ */
