#include "ps/app/kv_slicer.h"

#include <string.h>

#include "ps/base/log.h"

/* Keys may come from a received buffer with any alignment. */
static inline uint64_t load_key(const uint64_t *keys, size_t i)
{
    uint64_t k;
    memcpy(&k, (const unsigned char *)keys + i * sizeof(k), sizeof(k));
    return k;
}

static inline int32_t load_len(const int32_t *lens, size_t i)
{
    int32_t l;
    memcpy(&l, (const unsigned char *)lens + i * sizeof(l), sizeof(l));
    return l;
}

/* First index in [lo, n) whose key is >= bound. */
static size_t lower_bound(const uint64_t *keys, size_t lo, size_t n, uint64_t bound)
{
    size_t hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (load_key(keys, mid) < bound)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The value checks shared by both entry points: `lens` NULL needs a
 * uniform split (*per_key_p gets the bytes per key), else the lengths must
 * be >= 0 and add up to vals_bytes. Logs and returns PS_ERR_INVALID_ARG. */
static inline __attribute__((always_inline)) ps_status_t
check_vals(size_t num_keys, const int32_t *lens, size_t vals_bytes, size_t elem_size,
           size_t *per_key_p)
{
    size_t per_key = 0;
    if (num_keys == 0) {
        if (vals_bytes != 0) {
            ps_error(PS_LOG_APP, "kv: %zu value bytes for no keys", vals_bytes);
            return PS_ERR_INVALID_ARG;
        }
    } else if (!lens) {
        /* (A 64-bit division costs tens of cycles: the usual one key and
         * power-of-two element sizes go without.) */
        per_key = num_keys == 1 ? vals_bytes : vals_bytes / num_keys;
        size_t odd = (elem_size & (elem_size - 1)) == 0 ? per_key & (elem_size - 1)
                                                        : per_key % elem_size;
        if (per_key * num_keys != vals_bytes || odd != 0) {
            ps_error(PS_LOG_APP,
                     "kv: %zu value bytes do not split evenly over %zu keys of %zu-byte elements",
                     vals_bytes, num_keys, elem_size);
            return PS_ERR_INVALID_ARG;
        }
    } else {
        /* Checked in 64 bits: a key has at most INT32_MAX elements, and a
         * total that overflows would not match vals_bytes anyway. */
        uint64_t total = 0;
        for (size_t i = 0; i < num_keys; i++) {
            int32_t l = load_len(lens, i);
            if (l < 0) {
                ps_error(PS_LOG_APP, "kv: negative length %d for key index %zu", (int)l, i);
                return PS_ERR_INVALID_ARG;
            }
            total += (uint64_t)l;
            if (total > UINT64_MAX / elem_size / 2) {
                ps_error(PS_LOG_APP, "kv: per-key lengths overflow");
                return PS_ERR_INVALID_ARG;
            }
        }
        if (total * elem_size != (uint64_t)vals_bytes) {
            ps_error(PS_LOG_APP, "kv: lengths add up to %llu bytes, values have %zu",
                     (unsigned long long)(total * elem_size), vals_bytes);
            return PS_ERR_INVALID_ARG;
        }
    }
    *per_key_p = per_key;
    return PS_OK;
}

/* Value ranges of the key shares slices[0 .. num_ranges-1] (sorted and
 * disjoint, as the slicer makes them). */
static inline __attribute__((always_inline)) void
fill_vals(const int32_t *lens, size_t per_key, size_t elem_size, int num_ranges,
          ps_kv_slice_t *slices)
{
    size_t pos = 0;      /* index of the first key not yet counted */
    size_t val_pos = 0;  /* value offset of keys[pos] when lens are given */
    for (int r = 0; r < num_ranges; r++) {
        size_t b = slices[r].key_begin, e = slices[r].key_end;
        if (!lens) {
            slices[r].val_begin = b * per_key;
            slices[r].val_end = e * per_key;
            continue;
        }
        for (; pos < b; pos++)
            val_pos += (size_t)load_len(lens, pos) * elem_size;
        slices[r].val_begin = val_pos;
        for (; pos < e; pos++)
            val_pos += (size_t)load_len(lens, pos) * elem_size;
        slices[r].val_end = val_pos;
    }
}

/* The shares of one key that range `owner` has: its key and all values
 * there, empty shares before (at 0) and after (at the end). */
static void one_key_shares(int owner, size_t vals_bytes, int num_ranges, ps_kv_slice_t *slices)
{
    for (int r = 0; r < num_ranges; r++) {
        size_t b = r > owner ? 1 : 0, e = r >= owner ? 1 : 0;
        slices[r].key_begin = b;
        slices[r].key_end = e;
        slices[r].val_begin = b ? vals_bytes : 0;
        slices[r].val_end = e ? vals_bytes : 0;
    }
}

/* The range holding `key`: the last one starting at or below it, if the
 * key is below its end; -1 otherwise. */
static int owner_of(uint64_t key, const ps_kv_range_t *ranges, int num_ranges)
{
    int lo = 0, hi = num_ranges;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (ranges[mid].begin <= key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo > 0 && key < ranges[lo - 1].end ? lo - 1 : -1;
}

ps_status_t ps_kv_check_sorted(const uint64_t *keys, size_t num_keys)
{
    for (size_t i = 1; i < num_keys; i++) {
        if (load_key(keys, i - 1) >= load_key(keys, i)) {
            ps_error(PS_LOG_APP, "kv: keys must be sorted and unique (index %zu: %llu after %llu)",
                     i, (unsigned long long)load_key(keys, i),
                     (unsigned long long)load_key(keys, i - 1));
            return PS_ERR_INVALID_ARG;
        }
    }
    return PS_OK;
}

ps_status_t ps_kv_slice_keys(const uint64_t *keys, size_t num_keys, const int32_t *lens,
                             size_t vals_bytes, size_t elem_size,
                             const ps_kv_range_t *ranges, int num_ranges,
                             ps_kv_slice_t *slices)
{
    if (num_ranges <= 0 || !ranges || !slices || (num_keys > 0 && !keys)) {
        ps_error(PS_LOG_APP, "kv slicer: bad arguments (%d ranges, %zu keys)", num_ranges,
                 num_keys);
        return PS_ERR_INVALID_ARG;
    }
    if (elem_size == 0)
        elem_size = 1;
    /* One key, the usual small request: its values checked, then one
     * search, no cutting. A key in no range goes the general way, which
     * says so. */
    if (num_keys == 1) {
        size_t per_key;
        ps_status_t st = check_vals(1, lens, vals_bytes, elem_size, &per_key);
        if (st != PS_OK)
            return st;
        int owner = owner_of(load_key(keys, 0), ranges, num_ranges);
        if (owner >= 0) {
            one_key_shares(owner, vals_bytes, num_ranges, slices);
            return PS_OK;
        }
    }

    ps_status_t sorted = ps_kv_check_sorted(keys, num_keys);
    if (sorted != PS_OK)
        return sorted;

    size_t per_key;
    ps_status_t st = check_vals(num_keys, lens, vals_bytes, elem_size, &per_key);
    if (st != PS_OK)
        return st;

    size_t covered = 0;
    size_t pos = 0; /* index of the first key not yet assigned */
    for (int r = 0; r < num_ranges; r++) {
        size_t b = lower_bound(keys, pos, num_keys, ranges[r].begin);
        size_t e = ranges[r].end <= ranges[r].begin ? b
                                                     : lower_bound(keys, b, num_keys, ranges[r].end);
        slices[r].key_begin = b;
        slices[r].key_end = e;
        pos = e > pos ? e : pos;
        covered += e - b;
    }
    if (covered != num_keys) {
        ps_error(PS_LOG_APP, "kv: %zu of %zu keys lie in no server's key range",
                 num_keys - covered, num_keys);
        return PS_ERR_INVALID_ARG;
    }
    fill_vals(lens, per_key, elem_size, num_ranges, slices);
    return PS_OK;
}

ps_status_t ps_kv_slice_vals(size_t num_keys, const int32_t *lens, size_t vals_bytes,
                             size_t elem_size, const ps_kv_slice_t *by_key, int num_ranges,
                             ps_kv_slice_t *slices)
{
    if (num_ranges <= 0 || !by_key || !slices) {
        ps_error(PS_LOG_APP, "kv slicer: bad arguments (%d ranges, %zu keys)", num_ranges,
                 num_keys);
        return PS_ERR_INVALID_ARG;
    }
    if (elem_size == 0)
        elem_size = 1;
    size_t per_key;
    ps_status_t st = check_vals(num_keys, lens, vals_bytes, elem_size, &per_key);
    if (st != PS_OK)
        return st;
    for (int r = 0; r < num_ranges; r++) {
        slices[r].key_begin = by_key[r].key_begin;
        slices[r].key_end = by_key[r].key_end;
    }
    fill_vals(lens, per_key, elem_size, num_ranges, slices);
    return PS_OK;
}

ps_status_t ps_kv_shares_of_owners(const int *owner, size_t num_keys, int num_ranges,
                                   ps_kv_slice_t *by_key)
{
    if (num_ranges <= 0 || (num_keys && !owner) || !by_key)
        return PS_ERR_INVALID_ARG;
    for (int r = 0; r < num_ranges; r++)
        by_key[r] = (ps_kv_slice_t){0, 0, 0, 0};
    size_t i = 0;
    for (int r = 0; r < num_ranges; r++) {
        by_key[r].key_begin = by_key[r].key_end = i;
        while (i < num_keys && owner[i] == r)
            i++;
        by_key[r].key_end = i;
    }
    if (i != num_keys) {
        ps_error(PS_LOG_APP, "kv slicer: key %zu goes to server %d, after keys of server %d "
                 "(or out of 0..%d)", i, owner[i], i ? owner[i - 1] : -1, num_ranges - 1);
        return PS_ERR_INVALID_ARG;
    }
    return PS_OK;
}
