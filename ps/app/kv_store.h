/*
 * The default KV server handler's store: key -> value bytes (and their data
 * type), one lock per store.
 *
 * Semantics (ps_kv_store_handler):
 *  - push: the first push of a key copies the value; later pushes of the
 *    same type and length are summed element-wise for the numeric types
 *    (see kv_sum.h: integers wrap, FLOAT16/BFLOAT16 summed via float with
 *    round-to-nearest-even); CHAR and OTHER values are replaced, and so is a
 *    value pushed with another type or length (with a warning).
 *  - push-pull: the push as above, then answered with the stored values.
 *  - pull: answered with keys, the stored values, and per-key lengths (in
 *    elements of the request's type). A key never pushed is answered with a
 *    zero length and no bytes; the worker then completes the pull with
 *    PS_ERR_NOT_FOUND. The values are copied out under the lock, so a push
 *    arriving while the response is in flight cannot tear it.
 *
 * The functions below are the handler's pieces, for servers that want the
 * store's semantics inside their own handler, and for tests.
 */
#ifndef PS_APP_KV_STORE_H_
#define PS_APP_KV_STORE_H_

#include <stddef.h>
#include <stdint.h>

#include "ps/app/kv.h"
#include "ps/base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Applies a push (keys, values, optional lens, type). PS_ERR_INVALID_ARG
 * when the sizes do not add up; nothing is stored then. */
ps_status_t ps_kv_store_push(ps_kv_store_t *store, const ps_kv_pairs_t *req);

/* Builds a pull answer for req's keys into *res_p (new slices: keys
 * referenced from req, values and lens freshly allocated; release with
 * ps_slice_unref on each). */
ps_status_t ps_kv_store_pull(ps_kv_store_t *store, const ps_kv_pairs_t *req,
                             ps_kv_pairs_t *res_p);

/* Copies key's value into buf (up to cap bytes). *len_p gets its full
 * length and *type_p its type. PS_ERR_NOT_FOUND for a key never pushed. */
ps_status_t ps_kv_store_get(ps_kv_store_t *store, ps_key_t key, void *buf, size_t cap,
                            size_t *len_p, ps_data_type_t *type_p);

size_t ps_kv_store_num_keys(ps_kv_store_t *store);

#ifdef __cplusplus
}
#endif

#endif /* PS_APP_KV_STORE_H_ */
