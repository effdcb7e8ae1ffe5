/*
 * The command (KV `cmd`, upstream's `head`) of summation requests, as BytePS
 * workers encode it: the Cantor pairing of (request type, BytePS data type),
 *
 *     cmd = (r + d) * (r + d + 1) / 2 + d
 *
 * so cmd 0 is (default push-pull, float32). What the server supports:
 *  - request type DEFAULT (push, pull, and the KV push-pull request);
 *    ROW_SPARSE and COMPRESSED are decoded and refused (PS_ERR_UNSUPPORTED).
 *  - BytePS data types 0-6 (float32, float64, float16, uint8, int32, int8,
 *    int64, the mshadow numbering BytePS keeps).
 *  - cmd 0 with a typed request (the ps KV API carries the element type of
 *    the values) means "default push-pull of the request's type": this is
 *    how bfloat16, int16 and the other ps types are summed. cmd 0 with
 *    untyped bytes (PS_DATA_CHAR, what BytePS workers send) is float32, as
 *    in BytePS.
 *  - any other cmd names its type; a typed request whose type disagrees
 *    with it is refused (PS_ERR_INVALID_ARG).
 */
#ifndef PS_APP_SUM_SUM_CMD_H_
#define PS_APP_SUM_SUM_CMD_H_

#include "ps/base/status.h"
#include "ps/net/codec/message.h"

#ifdef __cplusplus
extern "C" {
#endif

/* BytePS RequestType. */
typedef enum {
    PS_SUM_REQ_DEFAULT = 0,
    PS_SUM_REQ_ROW_SPARSE = 1,
    PS_SUM_REQ_COMPRESSED = 2,
} ps_sum_request_type_t;

/* BytePS DataType (mshadow numbering). */
typedef enum {
    PS_BYTEPS_FLOAT32 = 0,
    PS_BYTEPS_FLOAT64 = 1,
    PS_BYTEPS_FLOAT16 = 2,
    PS_BYTEPS_UINT8 = 3,
    PS_BYTEPS_INT32 = 4,
    PS_BYTEPS_INT8 = 5,
    PS_BYTEPS_INT64 = 6,
} ps_byteps_dtype_t;
#define PS_BYTEPS_DTYPE_COUNT 7

/* The pairing; -1 when either value is negative or the result overflows. */
int ps_sum_cmd_encode(int request_type, int byteps_dtype);
/* Its inverse; PS_ERR_INVALID_ARG for a negative cmd. */
ps_status_t ps_sum_cmd_decode(int cmd, int *request_type_p, int *byteps_dtype_p);

/* BytePS data type <-> ps data type; PS_ERR_UNSUPPORTED when there is no
 * counterpart. */
ps_status_t ps_sum_dtype_from_byteps(int byteps_dtype, ps_data_type_t *type_p);
ps_status_t ps_sum_dtype_to_byteps(ps_data_type_t type, int *byteps_dtype_p);

/* The type a request is summed in, from its cmd and the type its values
 * carry (see above). PS_ERR_UNSUPPORTED for another request type or a data
 * type that is not summed, PS_ERR_INVALID_ARG for a contradiction. */
ps_status_t ps_sum_cmd_resolve(int cmd, ps_data_type_t request_type, ps_data_type_t *type_p);

/* The cmd a worker sends to sum values of `type`: the BytePS encoding when
 * BytePS has the type, else 0 (the request carries the type). */
int ps_sum_cmd_for_type(ps_data_type_t type);

#ifdef __cplusplus
}
#endif

#endif /* PS_APP_SUM_SUM_CMD_H_ */
