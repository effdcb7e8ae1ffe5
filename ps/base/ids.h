/*
 * The vocabulary every layer and the public API share, numbered as
 * upstream ps-lite / StepMesh: roles, node ids and groups, and the types
 * of values. The wire model (ps/net/codec/message.h) builds on it.
 */
#ifndef PS_BASE_IDS_H_
#define PS_BASE_IDS_H_

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Upstream's "unset" value for ids, app ids, timestamps (INT16_MAX). */
#define PS_NODE_EMPTY 32767

typedef enum {
    PS_ROLE_SERVER = 0,
    PS_ROLE_WORKER = 1,
    PS_ROLE_SCHEDULER = 2,
    PS_ROLE_JOINT = 3, /* one process hosting a server and a worker */
} ps_role_t;

/* Node ids and groups (upstream): groups are bit flags below 8, the
 * scheduler is 1, server rank r is 8 + 2r and worker rank r is 9 + 2r. */
#define PS_SCHEDULER_ID 1
/* Server and worker ids start here (server rank 0); ids below it are the
 * scheduler and the groups. */
#define PS_RANK_ID_BASE 8
#define PS_GROUP_SCHEDULER 1
#define PS_GROUP_SERVER 2
#define PS_GROUP_WORKER 4
#define PS_GROUP_ALL (PS_GROUP_SCHEDULER | PS_GROUP_SERVER | PS_GROUP_WORKER)

static inline int ps_server_rank_to_id(int rank) { return PS_RANK_ID_BASE + 2 * rank; }
static inline int ps_worker_rank_to_id(int rank) { return PS_RANK_ID_BASE + 1 + 2 * rank; }
/* max((id - 8) / 2, 0), as upstream's IDtoRank. */
static inline int ps_id_to_rank(int id)
{
    return id < PS_RANK_ID_BASE ? 0 : (id - PS_RANK_ID_BASE) / 2;
}
/* True for a group id (a union of PS_GROUP_* bits) rather than one node. */
static inline bool ps_id_is_group(int id) { return id >= 1 && id < PS_RANK_ID_BASE; }
/* Below 8 the scheduler, then even ids are servers and odd ids workers. */
static inline ps_role_t ps_id_to_role(int id)
{
    if (id < PS_RANK_ID_BASE)
        return PS_ROLE_SCHEDULER;
    return (id % 2) ? PS_ROLE_WORKER : PS_ROLE_SERVER;
}

typedef enum {
    PS_DATA_CHAR = 0,
    PS_DATA_INT8 = 1,
    PS_DATA_INT16 = 2,
    PS_DATA_INT32 = 3,
    PS_DATA_INT64 = 4,
    PS_DATA_UINT8 = 5,
    PS_DATA_UINT16 = 6,
    PS_DATA_UINT32 = 7,
    PS_DATA_UINT64 = 8,
    PS_DATA_FLOAT = 9,
    PS_DATA_DOUBLE = 10,
    PS_DATA_OTHER = 11,
    PS_DATA_FLOAT16 = 12,
    PS_DATA_BFLOAT16 = 13,
} ps_data_type_t;
#define PS_DATA_TYPE_COUNT 14

/* Bytes per element: 1 for CHAR, 2 for FLOAT16/BFLOAT16, ...; 0 when not
 * known (OTHER, values outside the enum). */
size_t ps_data_type_size(ps_data_type_t type);

/* Lower-case names ("server", "float16"); never NULL, "unknown" for
 * values outside the enum. */
const char *ps_role_str(ps_role_t role);
const char *ps_data_type_str(ps_data_type_t type);

#ifdef __cplusplus
}
#endif

#endif /* PS_BASE_IDS_H_ */
