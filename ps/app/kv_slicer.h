/*
 * The KV slicer: splits a request's sorted keys (and their values) across
 * the servers' key ranges, as upstream's default slicer does — a binary
 * search for each range boundary, values split by a uniform per-key size or
 * by per-key lengths.
 *
 * Pure computation on index ranges, so the worker can cut zero-copy
 * sub-slices of the caller's buffers and the tests can check it alone.
 */
#ifndef PS_APP_KV_SLICER_H_
#define PS_APP_KV_SLICER_H_

#include <stddef.h>
#include <stdint.h>

#include "ps/base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Keys [begin, end) belong to one server. Ranges passed to the slicer are
 * sorted and disjoint. */
typedef struct ps_kv_range {
    uint64_t begin;
    uint64_t end;
} ps_kv_range_t;

/* One server's share: keys [key_begin, key_end) (indices into the key
 * array, also into the lens array) and value bytes [val_begin, val_end).
 * An empty share has key_begin == key_end. */
typedef struct ps_kv_slice {
    size_t key_begin;
    size_t key_end;
    size_t val_begin;
    size_t val_end;
} ps_kv_slice_t;

/* PS_OK when the keys (read with unaligned loads) strictly increase, else
 * PS_ERR_INVALID_ARG (logged, naming the first out of order). */
ps_status_t ps_kv_check_sorted(const uint64_t *keys, size_t num_keys);

/* Slices `num_keys` keys (strictly increasing; read with unaligned loads)
 * with `vals_bytes` of values across `num_ranges` ranges, writing
 * slices[0 .. num_ranges-1].
 *
 * `lens` NULL: every key has vals_bytes / num_keys bytes (must divide, and
 * be a multiple of elem_size). Otherwise lens[i] >= 0 elements of
 * `elem_size` bytes each, summing to vals_bytes. elem_size 0 is taken as 1.
 *
 * PS_ERR_INVALID_ARG (logged) when keys are not sorted and unique, a key
 * lies in no range, or the sizes do not add up. */
ps_status_t ps_kv_slice_keys(const uint64_t *keys, size_t num_keys, const int32_t *lens,
                             size_t vals_bytes, size_t elem_size,
                             const ps_kv_range_t *ranges, int num_ranges,
                             ps_kv_slice_t *slices);

/* Cuts other values by the key shares `by_key` that ps_kv_slice_keys()
 * made of the same `num_keys` keys (a push-pull's destination, split by
 * its own `lens` or uniform size, with the push's keys): writes
 * slices[0 .. num_ranges-1] as ps_kv_slice_keys() would for these values,
 * without looking at the keys again. The same value checks and errors. */
ps_status_t ps_kv_slice_vals(size_t num_keys, const int32_t *lens, size_t vals_bytes,
                             size_t elem_size, const ps_kv_slice_t *by_key, int num_ranges,
                             ps_kv_slice_t *slices);

/* Key shares from a server index per key (owner[i] in 0 .. num_ranges-1,
 * non-decreasing): writes by_key[0 .. num_ranges-1] with their key ranges
 * (values left 0; ps_kv_slice_vals cuts them). PS_ERR_INVALID_ARG (logged)
 * when the owners are out of range or not in order. */
ps_status_t ps_kv_shares_of_owners(const int *owner, size_t num_keys, int num_ranges,
                                   ps_kv_slice_t *by_key);

#ifdef __cplusplus
}
#endif

#endif /* PS_APP_KV_SLICER_H_ */
