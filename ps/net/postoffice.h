/*
 * The postoffice: one per process (per role instance). It reads the job's
 * settings, opens the van, registers with the scheduler (or is the
 * scheduler), learns the node table, and then routes messages between the
 * van and the customers (apps) of this process. It also runs barriers,
 * heartbeats and failure detection.
 *
 * Every blocking call takes a deadline (milliseconds; <0 means the default
 * from the config table) and returns why it ended.
 */
#ifndef PS_NET_POSTOFFICE_H_
#define PS_NET_POSTOFFICE_H_

#include <stdint.h>

#include "ps/base/status.h"
#include "ps/net/caps.h"
#include "ps/net/codec/message.h"
#include "ps/net/message.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ps_postoffice ps_postoffice_t;

/* Group ids (PS_GROUP_SCHEDULER, PS_GROUP_SERVER, PS_GROUP_WORKER,
 * PS_GROUP_ALL) and node-id helpers are in ps/net/codec/message.h. */

/* What a process needs to join a job. ps_start_params_from_env() fills it
 * from DMLC_* / PS_* as upstream; programs that do not use the environment
 * fill it themselves (ps_start_params_init() sets the defaults). */
typedef struct ps_start_params {
    ps_role_t role;
    char scheduler_host[256];    /* DMLC_PS_ROOT_URI */
    int scheduler_port;          /* DMLC_PS_ROOT_PORT */
    int num_workers;             /* DMLC_NUM_WORKER */
    int num_servers;             /* DMLC_NUM_SERVER */
    char node_host[256];         /* DMLC_NODE_HOST ("" = from interface) */
    char interface[64];          /* DMLC_INTERFACE ("" = first usable) */
    int port;                    /* DMLC_PORT (0 = any free port) */
    int preferred_rank;          /* DMLC_RANK / DMLC_WORKER_ID (-1 = any) */
    char van[32];                /* "" = chosen by DMLC_ENABLE_RDMA etc. */
    int start_timeout_ms;        /* PS_START_TIMEOUT_MS */
    int barrier_timeout_ms;      /* PS_BARRIER_TIMEOUT_MS */
    int request_timeout_ms;      /* PS_REQUEST_TIMEOUT_MS */
    int finalize_timeout_ms;     /* PS_FINALIZE_TIMEOUT_MS */
    int heartbeat_interval_s;    /* PS_HEARTBEAT_INTERVAL (0 = off) */
    int heartbeat_timeout_s;     /* PS_HEARTBEAT_TIMEOUT (0 = never dead) */
    int busy_poll;               /* PS_BUSY_POLL */
} ps_start_params_t;

void ps_start_params_init(ps_start_params_t *params);
/* PS_ERR_CONFIG (logged, naming the variable) when a required one is
 * missing or a value does not parse. */
ps_status_t ps_start_params_from_env(ps_start_params_t *params_p);

/* Starts this node: opens the van, registers with the scheduler and waits
 * until every node has (or, for the scheduler, accepts them all), then runs
 * the start barrier when `do_barrier`. params NULL = from the environment.
 * Ends with PS_ERR_TIMED_OUT / PS_ERR_CONFIG / PS_ERR_PEER_GONE and a log
 * line saying what was missing instead of waiting forever. When the
 * scheduler cannot start the job (too few nodes by start_timeout_ms,
 * duplicate preferred ranks, ...) it tells every registered node why, and
 * they end with its status and words; servers and workers wait up to a
 * quarter of start_timeout_ms (at most 2 s) longer than the scheduler so
 * that they hear that verdict. */
ps_status_t ps_postoffice_start(const ps_start_params_t *params, int do_barrier,
                                ps_postoffice_t **po_p);

/* Leaves the job: barrier with everyone (when `do_barrier`), stops the van,
 * frees the postoffice. Never hangs: bounded by finalize_timeout_ms. */
ps_status_t ps_postoffice_finalize(ps_postoffice_t *po, int do_barrier);

/* Blocks until every node of `group` reached the barrier. */
ps_status_t ps_postoffice_barrier(ps_postoffice_t *po, int group, int timeout_ms);

/* Identity and job shape. */
int ps_postoffice_my_id(const ps_postoffice_t *po);
int ps_postoffice_my_rank(const ps_postoffice_t *po);
ps_role_t ps_postoffice_role(const ps_postoffice_t *po);
int ps_postoffice_num_workers(const ps_postoffice_t *po);
int ps_postoffice_num_servers(const ps_postoffice_t *po);
int ps_postoffice_request_timeout_ms(const ps_postoffice_t *po);

/* Node ids of a group (bit flags above) or of a single node id. Returns the
 * count (may exceed cap; only cap are written). */
int ps_postoffice_group_ids(const ps_postoffice_t *po, int group_or_id, int *ids, int cap);

/* Server `rank` owns keys [begin, end): the key space split evenly, as
 * upstream. */
ps_status_t ps_postoffice_server_key_range(const ps_postoffice_t *po, int server_rank,
                                           uint64_t *begin_p, uint64_t *end_p);

/* PS_CAP_* flags of the van in use, and its name (for logs only). */
uint32_t ps_postoffice_capabilities(const ps_postoffice_t *po);
const char *ps_postoffice_van_name(const ps_postoffice_t *po);

/* Sends a message to meta.recver (a node id); stamps meta.sender. Never
 * blocks on the network. The caller keeps and releases *msg. */
ps_status_t ps_postoffice_send(ps_postoffice_t *po, const ps_msg_t *msg);

/* Bytes sent/received by the van so far. */
void ps_postoffice_traffic(const ps_postoffice_t *po, uint64_t *sent_p, uint64_t *recv_p);

/* Nodes the scheduler has declared dead (heartbeats), up to cap. */
int ps_postoffice_dead_nodes(const ps_postoffice_t *po, int *ids, int cap);

#ifdef __cplusplus
}
#endif

#endif /* PS_NET_POSTOFFICE_H_ */
