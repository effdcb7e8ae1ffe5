#include "ps/app/kv_regroup.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ps/base/log.h"

/* Byte offset and length of each key's values (lens in elements, or an
 * even split). */
static ps_status_t key_spans(const ps_kv_pairs_t *kvs, size_t nk, size_t *off, size_t *len)
{
    size_t es = ps_data_type_size(kvs->type);
    es = es ? es : 1;
    size_t at = 0;
    for (size_t i = 0; i < nk; i++) {
        if (kvs->lens.len) {
            int32_t n;
            memcpy(&n, (const char *)ps_slice_ptr(&kvs->lens) + i * sizeof(n), sizeof(n));
            if (n < 0)
                return PS_ERR_INVALID_ARG;
            len[i] = (size_t)n * es;
        } else {
            if (kvs->vals.len % nk != 0)
                return PS_ERR_INVALID_ARG;
            len[i] = kvs->vals.len / nk;
        }
        off[i] = at;
        at += len[i];
    }
    return at == kvs->vals.len ? PS_OK : PS_ERR_INVALID_ARG;
}

/* A copy of `src`'s keys (8 bytes each) or lengths (4 bytes each) in the
 * order `order` gives. */
static ps_status_t permuted(const ps_slice_t *src, size_t width, const size_t *order, size_t nk,
                            ps_slice_t *dst)
{
    ps_status_t st = ps_slice_alloc(nk * width, 0, dst);
    for (size_t j = 0; st == PS_OK && j < nk; j++)
        memcpy((char *)ps_slice_ptr(dst) + j * width,
               (const char *)ps_slice_ptr(src) + order[j] * width, width);
    return st;
}

/* The values of `kvs` in the order `order` gives, with their spans. */
static ps_status_t permuted_vals(const ps_kv_pairs_t *kvs, const size_t *order, size_t nk,
                                 const size_t *off, const size_t *len, ps_slice_t *dst)
{
    ps_status_t st = ps_slice_alloc(kvs->vals.len, 0, dst);
    size_t at = 0;
    for (size_t j = 0; st == PS_OK && j < nk; j++) {
        memcpy((char *)ps_slice_ptr(dst) + at,
               (const char *)ps_slice_ptr(&kvs->vals) + off[order[j]], len[order[j]]);
        at += len[order[j]];
    }
    return st;
}

ps_status_t ps__kv_regroup(const ps_kv_pairs_t *push, const ps_kv_pairs_t *out, const int *owner,
                           int num_servers, ps__kv_regroup_t *rg)
{
    memset(rg, 0, sizeof(*rg));
    const ps_kv_pairs_t *req = push ? push : out;
    size_t nk = ps_kv_pairs_num_keys(req);
    if ((push && !ps_slice_in_host_mem(&push->vals)) ||
        (out && !ps_slice_in_host_mem(&out->vals))) {
        ps_error(PS_LOG_APP, "kv: a slicer that sends keys to servers out of key order needs "
                 "values in host memory");
        return PS_ERR_INVALID_ARG;
    }
    /* A stable counting sort of the keys by server. */
    size_t *order = calloc(nk ? nk : 1, sizeof(*order));
    size_t *count = calloc((size_t)num_servers + 1, sizeof(*count));
    size_t *spans = calloc(nk ? 4 * nk : 1, sizeof(*spans));
    rg->owner = calloc(nk ? nk : 1, sizeof(*rg->owner));
    ps_status_t st = order && count && spans && rg->owner ? PS_OK : PS_ERR_NO_MEMORY;
    for (size_t i = 0; st == PS_OK && i < nk; i++) {
        if (owner[i] < 0 || owner[i] >= num_servers)
            st = PS_ERR_INVALID_ARG;
        else
            count[owner[i] + 1]++;
    }
    for (int s = 0; st == PS_OK && s < num_servers; s++)
        count[s + 1] += count[s];
    for (size_t i = 0; st == PS_OK && i < nk; i++) {
        size_t j = count[owner[i]]++;
        order[j] = i;
        rg->owner[j] = owner[i];
    }
    rg->num_keys = nk;
    size_t *push_off = spans, *push_len = spans + nk, *out_off = spans + 2 * nk,
           *out_len = spans + 3 * nk;
    if (st == PS_OK && push) {
        rg->push.type = push->type;
        if ((st = key_spans(push, nk, push_off, push_len)) == PS_OK &&
            (st = permuted(&push->keys, sizeof(ps_key_t), order, nk, &rg->push.keys)) == PS_OK &&
            (st = permuted_vals(push, order, nk, push_off, push_len, &rg->push.vals)) == PS_OK &&
            push->lens.len)
            st = permuted(&push->lens, sizeof(int32_t), order, nk, &rg->push.lens);
    }
    if (st == PS_OK && out) {
        rg->out.type = out->type;
        rg->dest = ps_slice_ref(&out->vals);
        rg->scatter = calloc(nk ? 2 * nk : 1, sizeof(*rg->scatter));
        if (!rg->scatter)
            st = PS_ERR_NO_MEMORY;
        if (st == PS_OK && (st = key_spans(out, nk, out_off, out_len)) == PS_OK &&
            (st = permuted(out->keys.len ? &out->keys : &push->keys, sizeof(ps_key_t), order, nk,
                           &rg->out.keys)) == PS_OK &&
            (st = ps_slice_alloc(out->vals.len, 0, &rg->out.vals)) == PS_OK && out->lens.len)
            st = permuted(&out->lens, sizeof(int32_t), order, nk, &rg->out.lens);
        for (size_t j = 0; st == PS_OK && j < nk; j++) {
            rg->scatter[2 * j] = out_off[order[j]];
            rg->scatter[2 * j + 1] = out_len[order[j]];
        }
    }
    free(order);
    free(count);
    free(spans);
    if (st != PS_OK) {
        if (st == PS_ERR_INVALID_ARG)
            ps_error(PS_LOG_APP, "kv: the slicer named a server out of 0..%d, or the values do "
                     "not split over the keys", num_servers - 1);
        ps__kv_regroup_free(rg);
    }
    return st;
}

ps_status_t ps__kv_regroup_scatter(const size_t *scatter, size_t num_keys,
                                   const ps_slice_t *scratch, const ps_slice_t *dest)
{
    size_t at = 0;
    for (size_t j = 0; j < num_keys; j++) {
        size_t off = scatter[2 * j], len = scatter[2 * j + 1];
        if (at + len > scratch->len || off + len > dest->len)
            return PS_ERR_INVALID_ARG;
        memcpy((char *)ps_slice_ptr(dest) + off, (const char *)ps_slice_ptr(scratch) + at, len);
        at += len;
    }
    return PS_OK;
}

void ps__kv_regroup_free(ps__kv_regroup_t *rg)
{
    free(rg->owner);
    free(rg->scatter);
    ps_slice_unref(&rg->push.keys);
    ps_slice_unref(&rg->push.vals);
    ps_slice_unref(&rg->push.lens);
    ps_slice_unref(&rg->out.keys);
    ps_slice_unref(&rg->out.vals);
    ps_slice_unref(&rg->out.lens);
    ps_slice_unref(&rg->dest);
    memset(rg, 0, sizeof(*rg));
}
