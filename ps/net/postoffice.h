/*
 * The postoffice: one per process (per role instance). It reads the job's
 * settings, opens the van, registers with the scheduler (or is the
 * scheduler), learns the node table, and then routes messages between the
 * van and the customers (apps) of this process. It also runs barriers,
 * heartbeats and failure detection.
 *
 * Every blocking call takes a deadline (milliseconds; <0 means the default
 * from the config table) and returns why it ended. The statuses a blocking
 * call (start, barrier, finalize, ps_customer_wait) ends with, and what
 * each means for the caller:
 *   PS_OK               it completed.
 *   PS_ERR_TIMED_OUT    its deadline passed (PS_START_TIMEOUT_MS,
 *                       PS_BARRIER_TIMEOUT_MS, PS_REQUEST_TIMEOUT_MS,
 *                       PS_FINALIZE_TIMEOUT_MS or the caller's), or, with
 *                       PS_RESEND, a message was not acknowledged after
 *                       every resend. Nothing is known to be dead.
 *   PS_ERR_PEER_GONE    a node it needed is dead: the scheduler declared it
 *                       so (its connection closed, or it sent no heartbeat
 *                       for PS_HEARTBEAT_TIMEOUT), or it is the scheduler
 *                       that is lost (then every later wait of this node
 *                       ends so too).
 *   PS_ERR_LINK_FAILED  the connection to a peer failed or could not be
 *                       made, and the peer may still be alive (the
 *                       scheduler has not declared it dead). Requests
 *                       waiting for a peer whose connection closed fail
 *                       with PS_ERR_PEER_GONE at once, before the
 *                       scheduler's verdict.
 *   PS_ERR_CONFIG       the job is misconfigured: a variable is missing or
 *                       malformed, or the nodes disagree (DMLC_NUM_SERVER /
 *                       DMLC_NUM_WORKER differ between nodes, two nodes ask
 *                       for one rank, a node too many registers).
 *   PS_ERR_SHUTDOWN     this node (or the customer) is being finalized, or
 *                       the job is finishing and refuses a late node.
 * Each is logged once, where it was decided, with the node and the reason.
 *
 * Failure handling. Heartbeats are on by default (PS_HEARTBEAT_INTERVAL 5 s,
 * PS_HEARTBEAT_TIMEOUT 20 s): the scheduler declares a node dead when its
 * connection closes or it has been silent for the timeout, tells every
 * other node (which fail requests waiting for it and run the node-failed
 * callbacks below), and fails barriers it can no longer complete. A node
 * that loses the scheduler ends every wait with PS_ERR_PEER_GONE.
 *
 * Recovery (as upstream, but only for a node that proves it belongs to the
 * job). A server or worker started after the job is complete registers like
 * any other. The scheduler takes it as a replacement only when the job has
 * a job secret (PS_JOB_SECRET: its connection proved it), when the node
 * carries the job's id (PS_JOB_ID: the id the scheduler logs at start and
 * every node learns, ps_postoffice_job_id()), or when the scheduler runs
 * with PS_ALLOW_RECOVERY=1. Any other late node (typically a second job
 * started on the same scheduler port) is refused at once with
 * PS_ERR_CONFIG and words naming the running job. Otherwise the scheduler
 * gives it the id of a
 * dead node of its role (of its preferred rank, if it has one), sends it
 * the table, and tells every other node, which reconnect to it and run the
 * node-recovered callbacks. The new process learns it took over with
 * ps_postoffice_is_recovery() and skips the start barrier. A registration
 * that finds no dead node of its role waits up to PS_HEARTBEAT_TIMEOUT + 2 s
 * for one (its predecessor may be hung rather than gone), then is refused
 * with PS_ERR_CONFIG (a node too many). A barrier that includes a dead node
 * fails with PS_ERR_PEER_GONE; a job that wants to survive a restart waits
 * with ps_postoffice_wait_alive() and enters the barrier again.
 *
 * PS_RESEND=1 makes every data message acknowledged by its receiver and
 * resent PS_RESEND_TIMEOUT ms after it was sent, then after 2x, 3x, ...
 * that, until it is acknowledged, at most 10 times (as upstream, which
 * aborted then). The receiver drops duplicates, keyed by (app, customer,
 * sender, receiver, timestamp, request), remembered for the whole resend
 * schedule plus 10 s, at most 2^20 keys. A request whose message runs out
 * of resends fails with PS_ERR_TIMED_OUT. Data sent stays referenced until
 * acknowledged. PS_DROP_MSG=N drops N % of the data messages a node
 * receives, on purpose (testing; control messages are never dropped).
 */
#ifndef PS_NET_POSTOFFICE_H_
#define PS_NET_POSTOFFICE_H_

#include <stdint.h>

#include "ps/base/ids.h"
#include "ps/base/status.h"
#include "ps/net/caps.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ps_postoffice ps_postoffice_t;

/* Longest job id (PS_JOB_ID): letters, digits, '.', '-' and '_'. */
#define PS_JOB_ID_MAX 64

/* Most instances per group (DMLC_GROUP_SIZE). */
#define PS_GROUP_SIZE_MAX 1024

/* Roles, group ids (PS_GROUP_SCHEDULER, PS_GROUP_SERVER, PS_GROUP_WORKER,
 * PS_GROUP_ALL) and node-id helpers are in ps/base/ids.h. Sending messages
 * (for the apps built on the postoffice) is in ps/net/postoffice_msg.h. */

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
    int finalize_timeout_ms;     /* PS_FINALIZE_TIMEOUT_MS (-1: the finalize
                                  * barrier waits for every node or a death) */
    int heartbeat_interval_s;    /* PS_HEARTBEAT_INTERVAL (0 = off) */
    int heartbeat_timeout_s;     /* PS_HEARTBEAT_TIMEOUT (0 = never dead;
                                  * the scheduler's decides; keep it above
                                  * the interval) */
    int busy_poll;               /* PS_BUSY_POLL */
    int group_size;              /* DMLC_GROUP_SIZE: instances per server
                                  * or worker group (1) */
    int instance;                /* this node's instance in its group
                                  * (DMLC_INSTANCE_ID, ...): -1 = whichever
                                  * the rank the scheduler gives implies */
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
 * that they hear that verdict. Nodes started with other DMLC_NUM_SERVER /
 * DMLC_NUM_WORKER than the scheduler's end everyone's start at once with
 * PS_ERR_CONFIG. A server or worker started after the job is complete
 * takes over a dead node when it may (see Recovery above; then
 * ps_postoffice_is_recovery() is 1 and the start barrier is skipped), or
 * ends with PS_ERR_CONFIG (nothing to take over) or PS_ERR_SHUTDOWN (the
 * job is finishing). */
ps_status_t ps_postoffice_start(const ps_start_params_t *params, int do_barrier,
                                ps_postoffice_t **po_p);

/* Leaves the job: barrier with everyone (when `do_barrier`), stops the van,
 * frees the postoffice (and every node-event registration). By default
 * (finalize_timeout_ms -1) the barrier waits, as ps-lite's Finalize does,
 * until every node reached it or one is declared dead (its connection
 * closed, or no heartbeat for PS_HEARTBEAT_TIMEOUT) or the scheduler is
 * lost; with finalize_timeout_ms >= 0 at most that long. What follows the
 * barrier is bounded by ps_postoffice_finalize_timeout_ms(). With
 * `do_barrier`, PS_ERR_TIMED_OUT or
 * PS_ERR_PEER_GONE (a node is dead, or the scheduler is lost) say the job
 * did not end together; the postoffice is freed all the same. One
 * exception: when a busy-poll waiter (PS_BUSY_POLL) still runs the van's
 * loop after the deadline (at least 1 s), say in a receive function that
 * blocks, the van must outlive it: its outstanding requests fail with
 * PS_ERR_SHUTDOWN, the van stays open, the postoffice stays allocated
 * (and unusable) and finalize returns PS_ERR_TIMED_OUT. */
ps_status_t ps_postoffice_finalize(ps_postoffice_t *po, int do_barrier);

/* Blocks until every node of `group` reached the barrier: PS_OK,
 * PS_ERR_TIMED_OUT (timeout_ms, <0 = PS_BARRIER_TIMEOUT_MS),
 * PS_ERR_PEER_GONE at once when a node of the group is dead (or dies
 * meanwhile) or the scheduler is lost. */
ps_status_t ps_postoffice_barrier(ps_postoffice_t *po, int group, int timeout_ms);

/* Identity and job shape.
 *
 * Instance groups (DMLC_GROUP_SIZE = g > 1, as upstream and StepMesh): each
 * of DMLC_NUM_SERVER server groups and DMLC_NUM_WORKER worker groups has g
 * instances, each a node of its own (a process per GPU, or several
 * postoffices in one process: ps_postoffice_start_group()). A node's rank
 * counts instances: group rank * g + instance. Instance i of a worker group
 * talks to instance i of every server group and to no other: the apps
 * address servers by group rank through ps_postoffice_peer_id(), so a job
 * of g instances per group is g independent jobs of DMLC_NUM_SERVER
 * servers and DMLC_NUM_WORKER workers sharing a scheduler. Barriers count
 * every instance. With g = 1 (the default) instance and group are the
 * node. */
int ps_postoffice_my_id(const ps_postoffice_t *po);
/* Rank among the nodes of this role, instances counted (0 .. groups*g-1). */
int ps_postoffice_my_rank(const ps_postoffice_t *po);
ps_role_t ps_postoffice_role(const ps_postoffice_t *po);
/* Worker and server groups (DMLC_NUM_WORKER, DMLC_NUM_SERVER). */
int ps_postoffice_num_workers(const ps_postoffice_t *po);
int ps_postoffice_num_servers(const ps_postoffice_t *po);
/* DMLC_GROUP_SIZE, and this node's instance in its group (0 for the
 * scheduler). */
int ps_postoffice_group_size(const ps_postoffice_t *po);
int ps_postoffice_instance(const ps_postoffice_t *po);
/* The node id of the peer of `role` (server or worker) in group
 * `group_rank` that this node talks to: the one of this node's instance.
 * -1 when there is no such group. */
int ps_postoffice_peer_id(const ps_postoffice_t *po, ps_role_t role, int group_rank);
/* The group rank of node `id` when it is a server or worker of this node's
 * instance (a peer this node talks to), else -1. */
int ps_postoffice_peer_rank(const ps_postoffice_t *po, int id);
int ps_postoffice_request_timeout_ms(const ps_postoffice_t *po);
/* What teardown calls (destroy, remove) wait by default: finalize_timeout_ms,
 * or PS_TEARDOWN_DEFAULT_MS when that is -1 (no limit on the barrier). */
#define PS_TEARDOWN_DEFAULT_MS 30000
int ps_postoffice_finalize_timeout_ms(const ps_postoffice_t *po);

/* Node ids of a group (bit flags above) or of a single node id. Returns the
 * count (may exceed cap; only cap are written). */
int ps_postoffice_group_ids(const ps_postoffice_t *po, int group_or_id, int *ids, int cap);

/* Server group `server_rank` owns keys [begin, end): the key space split
 * evenly over the server groups, as upstream. */
ps_status_t ps_postoffice_server_key_range(const ps_postoffice_t *po, int server_rank,
                                           uint64_t *begin_p, uint64_t *end_p);

/* PS_CAP_* flags of the van in use, and its name (for logs only). */
uint32_t ps_postoffice_capabilities(const ps_postoffice_t *po);
const char *ps_postoffice_van_name(const ps_postoffice_t *po);

/* 1 when the van reaches node `id` through memory shared on this host
 * (the shm van, or the ipc van's shared-memory side), so that node's
 * process can open this one's device IPC handles; 0 otherwise. */
int ps_postoffice_peer_same_host(const ps_postoffice_t *po, int id);

/* Bytes sent/received by the van so far. */
void ps_postoffice_traffic(const ps_postoffice_t *po, uint64_t *sent_p, uint64_t *recv_p);

/* Nodes the scheduler has declared dead (and that no new process has
 * taken over since), up to cap; returns how many. */
int ps_postoffice_dead_nodes(const ps_postoffice_t *po, int *ids, int cap);

/* 1 when this process took over the id of a dead node (recovery) instead
 * of starting with the job. */
int ps_postoffice_is_recovery(const ps_postoffice_t *po);

/* The job's id: the scheduler issues it at start (PS_JOB_ID when set, else
 * a random one; it logs it at info level) and every node learns it with the
 * node table. Give it to a restarted server or worker as PS_JOB_ID so that
 * the scheduler lets it take over a dead node. Never NULL; "" only on a
 * node that has not started. */
const char *ps_postoffice_job_id(const ps_postoffice_t *po);

/* Blocks until no node of `group` (group bits or one node id) is dead:
 * PS_OK (at once when none is), PS_ERR_TIMED_OUT (timeout_ms, <0 =
 * PS_BARRIER_TIMEOUT_MS), PS_ERR_PEER_GONE when the scheduler is lost,
 * PS_ERR_SHUTDOWN once finalize began. For jobs that wait for a restarted
 * node before entering a barrier again. */
ps_status_t ps_postoffice_wait_alive(ps_postoffice_t *po, int group, int timeout_ms);

/* Node events. `why` is the status the node failed with (PS_ERR_PEER_GONE;
 * node_id PS_SCHEDULER_ID when this node lost the scheduler), or PS_OK for
 * a recovery (a new process took node_id over). Called on a postoffice
 * thread (the van's or the timer's), without locks held, after the
 * postoffice updated its own state (requests waiting for a failed node
 * have failed, ps_postoffice_dead_nodes() lists it). It must not block; it
 * may send and create requests. Each event is reported once per node and
 * death (or recovery), to every callback registered when it happens;
 * nodes already dead when a callback is registered are not reported: read
 * ps_postoffice_dead_nodes() after registering. */
typedef void (*ps_node_event_func_t)(void *arg, ps_postoffice_t *po, int node_id,
                                     ps_status_t why);

/* Registers fn(arg) for node failures / recoveries. PS_ERR_NO_RESOURCE
 * beyond PS_NODE_CALLBACKS_MAX registrations per postoffice. */
#define PS_NODE_CALLBACKS_MAX 16
ps_status_t ps_postoffice_on_node_failed(ps_postoffice_t *po, ps_node_event_func_t fn,
                                         void *arg);
ps_status_t ps_postoffice_on_node_recovered(ps_postoffice_t *po, ps_node_event_func_t fn,
                                            void *arg);
/* Removes every registration of (fn, arg); when it returns, no call of it
 * runs any more (unless it is called from that callback itself). Call it
 * before freeing arg, and before ps_postoffice_finalize() returns is not
 * needed: finalize drops every registration. */
void ps_postoffice_remove_node_callback(ps_postoffice_t *po, ps_node_event_func_t fn,
                                        void *arg);
/* The same, waiting up to timeout_ms (< 0: finalize_timeout_ms) for a call
 * in progress: PS_OK, or PS_ERR_TIMED_OUT when a call (of any callback)
 * still runs then: the registration is gone, but arg must stay valid
 * until that call returned (a later call of this says when). The plain
 * call waits finalize_timeout_ms and logs an error when it gave up. */
ps_status_t ps_postoffice_remove_node_callback_timed(ps_postoffice_t *po,
                                                     ps_node_event_func_t fn, void *arg,
                                                     int timeout_ms);

#ifdef __cplusplus
}
#endif

#endif /* PS_NET_POSTOFFICE_H_ */
