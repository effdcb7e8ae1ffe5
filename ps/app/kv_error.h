/*
 * The KV app's error answer: a response without data whose body is
 * "PSKVERR" NUL and the status (int32, little-endian), so that a server's
 * handler can fail a request and the worker's wait returns its status.
 * Shared by the server (writes it) and the worker (reads it).
 */
#ifndef PS_APP_KV_ERROR_H_
#define PS_APP_KV_ERROR_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ps/base/status.h"

#define PS__KV_ERROR_TAG "PSKVERR"
#define PS__KV_ERROR_TAG_LEN 8 /* with its NUL */
#define PS__KV_ERROR_LEN (PS__KV_ERROR_TAG_LEN + 4)

/* The statuses a server may send: errors of the ranges status.h defines. */
static inline int ps__kv_error_ok(int32_t status)
{
    return status < 0 && status > -128;
}

static inline void ps__kv_error_pack(ps_status_t status, uint8_t out[PS__KV_ERROR_LEN])
{
    uint32_t v = (uint32_t)(int32_t)status;
    memcpy(out, PS__KV_ERROR_TAG, PS__KV_ERROR_TAG_LEN);
    for (int i = 0; i < 4; i++) {
        out[PS__KV_ERROR_TAG_LEN + i] = (uint8_t)(v >> (8 * i));
    }
}

/* PS_OK for a body that is no error answer; else the status it carries,
 * or PS_ERR_PROTOCOL for a malformed one. */
static inline ps_status_t ps__kv_error_read(const uint8_t *body, size_t len)
{
    if (body == NULL || len < PS__KV_ERROR_TAG_LEN ||
        memcmp(body, PS__KV_ERROR_TAG, PS__KV_ERROR_TAG_LEN) != 0) {
        return PS_OK;
    }
    if (len != PS__KV_ERROR_LEN) {
        return PS_ERR_PROTOCOL;
    }
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        v |= (uint32_t)body[PS__KV_ERROR_TAG_LEN + i] << (8 * i);
    }
    int32_t s = (int32_t)v;
    return ps__kv_error_ok(s) ? (ps_status_t)s : PS_ERR_PROTOCOL;
}

#endif /* PS_APP_KV_ERROR_H_ */
