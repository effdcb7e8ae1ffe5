#include "ps/app/sum/sum_cmd.h"

#include <limits.h>
#include <stdint.h>

#include "ps/app/kv_sum.h"

int ps_sum_cmd_encode(int request_type, int byteps_dtype)
{
    if (request_type < 0 || byteps_dtype < 0)
        return -1;
    int64_t s = (int64_t)request_type + byteps_dtype;
    int64_t cmd = s * (s + 1) / 2 + byteps_dtype;
    return cmd > INT_MAX ? -1 : (int)cmd;
}

ps_status_t ps_sum_cmd_decode(int cmd, int *request_type_p, int *byteps_dtype_p)
{
    if (cmd < 0)
        return PS_ERR_INVALID_ARG;
    /* w = the largest integer with w(w+1)/2 <= cmd (integer arithmetic, no
     * rounding of a square root). */
    int64_t w = 0;
    int64_t lo = 0, hi = 65536; /* 65536 * 65537 / 2 > INT_MAX */
    while (lo <= hi) {
        int64_t mid = (lo + hi) / 2;
        if (mid * (mid + 1) / 2 <= cmd) {
            w = mid;
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    int64_t y = cmd - w * (w + 1) / 2;
    *request_type_p = (int)(w - y);
    *byteps_dtype_p = (int)y;
    return PS_OK;
}

ps_status_t ps_sum_dtype_from_byteps(int byteps_dtype, ps_data_type_t *type_p)
{
    static const ps_data_type_t map[PS_BYTEPS_DTYPE_COUNT] = {
        [PS_BYTEPS_FLOAT32] = PS_DATA_FLOAT, [PS_BYTEPS_FLOAT64] = PS_DATA_DOUBLE,
        [PS_BYTEPS_FLOAT16] = PS_DATA_FLOAT16, [PS_BYTEPS_UINT8] = PS_DATA_UINT8,
        [PS_BYTEPS_INT32] = PS_DATA_INT32, [PS_BYTEPS_INT8] = PS_DATA_INT8,
        [PS_BYTEPS_INT64] = PS_DATA_INT64,
    };
    if (byteps_dtype < 0 || byteps_dtype >= PS_BYTEPS_DTYPE_COUNT)
        return PS_ERR_UNSUPPORTED;
    *type_p = map[byteps_dtype];
    return PS_OK;
}

ps_status_t ps_sum_dtype_to_byteps(ps_data_type_t type, int *byteps_dtype_p)
{
    for (int d = 0; d < PS_BYTEPS_DTYPE_COUNT; d++) {
        ps_data_type_t t;
        if (ps_sum_dtype_from_byteps(d, &t) == PS_OK && t == type) {
            *byteps_dtype_p = d;
            return PS_OK;
        }
    }
    return PS_ERR_UNSUPPORTED;
}

ps_status_t ps_sum_cmd_resolve(int cmd, ps_data_type_t request_type, ps_data_type_t *type_p)
{
    int req, dtype;
    ps_status_t st = ps_sum_cmd_decode(cmd, &req, &dtype);
    if (st != PS_OK)
        return st;
    if (req != PS_SUM_REQ_DEFAULT)
        return PS_ERR_UNSUPPORTED;
    int typed = request_type != PS_DATA_CHAR && request_type != PS_DATA_OTHER;
    if (cmd == 0 && typed) {
        if (!ps_kv_type_summable(request_type))
            return PS_ERR_UNSUPPORTED;
        *type_p = request_type;
        return PS_OK;
    }
    ps_data_type_t t;
    if ((st = ps_sum_dtype_from_byteps(dtype, &t)) != PS_OK)
        return st;
    if (typed && request_type != t)
        return PS_ERR_INVALID_ARG;
    *type_p = t;
    return PS_OK;
}

int ps_sum_cmd_for_type(ps_data_type_t type)
{
    int d;
    if (ps_sum_dtype_to_byteps(type, &d) != PS_OK)
        return 0;
    return ps_sum_cmd_encode(PS_SUM_REQ_DEFAULT, d);
}
