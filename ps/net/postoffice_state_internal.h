/*
 * The postoffice's state, shared by the files of the postoffice inside
 * //ps/net (postoffice.c lists them). Nothing outside ps/net includes
 * this.
 *
 * Locking: po->lock guards the fields marked so; it is never held while
 * calling the van or the registry (a van may call back synchronously).
 */
#ifndef PS_NET_POSTOFFICE_STATE_INTERNAL_H_
#define PS_NET_POSTOFFICE_STATE_INTERNAL_H_

#include <stddef.h>
#include <stdint.h>

#include "ps/base/log.h"
#include "ps/base/status.h"
#include "ps/base/thread.h"
#include "ps/base/time.h"
#include "ps/net/codec/message.h"
#include "ps/net/message.h"
#include "ps/net/postoffice.h"
#include "ps/net/postoffice_msg.h"
#include "ps/net/postoffice_internal.h"
#include "ps/net/profile_internal.h"
#include "ps/net/resender_internal.h"
#include "ps/net/van/van.h"

/* Group ids (unions of the PS_GROUP_* bits) are below this. */
#define PS__NUM_GROUPS (PS_GROUP_ALL + 1)
/* Ids for nodes the scheduler must answer before ids exist (a failed
 * start): no real id is in use yet, so any valid node id will do. */
#define PS__TEMP_ID_BASE PS_RANK_ID_BASE
/* How long the scheduler waits for nodes it told to leave to disconnect. */
#define PS__LINGER_MS 3000
/* How long finalize waits at least for busy-poll waiters to hand the van's
 * loop back, whatever is left of its deadline. */
#define PS__DRIVERS_MIN_MS 1000
/* Between attempts to reach a scheduler that is not up yet. */
#define PS__RECONNECT_MS 200
/* How much longer than the scheduler a node waits for the node table. */
#define PS__START_GRACE_MIN_MS 100
#define PS__START_GRACE_MAX_MS 2000
/* Granularity of the scheduler's dead-node scan. */
#define PS__DEAD_SCAN_NS (500ull * 1000000ull)
/* A late registration waits this much longer than PS_HEARTBEAT_TIMEOUT for
 * a node of its role to be declared dead (its predecessor may be hung,
 * not gone), then is refused. */
#define PS__RECOVERY_WAIT_GRACE_MS 2000
/* Ids the scheduler uses to answer a node it refuses once the job runs:
 * far above any real node id (the van needs an id to address it). */
#define PS__REFUSE_ID_BASE 30000
#define PS__REFUSE_ID_SPAN 2000
/* Resolving DMLC_PS_ROOT_URI again after a temporary DNS failure: the
 * first pause, doubled up to the last. */
#define PS__RESOLVE_BACKOFF_MIN_MS 200
#define PS__RESOLVE_BACKOFF_MAX_MS 5000

/* Scheduler: a node registered after the table was complete, waiting for a
 * dead node of its role to take over. */
typedef struct {
    ps_node_t node;
    uint64_t expires_ns;
} ps__po_late_t;

/* A registered node-event callback. */
typedef struct {
    ps_node_event_func_t fn;
    void *arg;
} ps__po_node_cb_t;

typedef struct {
    uint64_t done_gen;   /* replies received for this group */
    ps_status_t status;  /* of the last reply */
    char reason[160];    /* the scheduler's words when it failed the barrier */
    int busy;            /* a thread of this node waits in this group */
} ps__po_barrier_wait_t;

typedef struct {
    int *ids;            /* scheduler: who arrived */
    size_t n;
    size_t cap;
} ps__po_barrier_arrivals_t;

/* What only the scheduler keeps (under po->lock unless noted). */
typedef struct {
    ps_node_t *reg_nodes; /* registrations so far */
    size_t num_reg;
    size_t cap_reg;

    int *left;            /* finalizing: nodes that disconnected */
    size_t num_left;
    size_t left_cap;

    ps__po_barrier_arrivals_t arrivals[PS__NUM_GROUPS];

    uint64_t *last_seen_ns;  /* per table index (atomic: written by the van thread) */

    ps__po_late_t *late;     /* late registrations waiting */
    size_t num_late;
    size_t cap_late;
    int refuse_seq;          /* next refusal id offset */
    ps_status_t verdict;     /* starting: a registration made the start
                              * impossible (PS_ERR_CONFIG) */
    char verdict_reason[512];
    size_t num_told;         /* failed start: nodes told why */
    size_t num_refused;      /* registrations refused so far */
    char last_refusal[512];  /* why the last one was */

    /* The job's identity (set at start, then read-only). */
    int job_id_given;        /* from PS_JOB_ID */
    int64_t job_started_s;   /* wall-clock start (Unix s) */
    uint64_t job_started_ns; /* monotonic start */
    int allow_recovery;      /* PS_ALLOW_RECOVERY */
} ps__scheduler_state_t;

struct ps_postoffice {
    ps_start_params_t params;
    const ps_van_component_t *van_comp;
    ps_van_t *van;
    ps_van_attr_t attr;
    ps__registry_t *reg;
    int is_scheduler;

    ps_node_t my_node;
    int my_id; /* atomic: read by senders on any thread */

    ps_mutex_t lock;
    ps_cond_t cond;       /* start, barrier and finalize waits */
    ps_cond_t timer_cond; /* the timer thread */

    /* ---- every node (under lock) ---- */
    int ready;            /* node table known and connections made */
    int finalizing;

    ps_node_t *nodes;     /* the table: servers by rank, workers by rank, scheduler */
    size_t num_nodes;

    int *dead;
    size_t num_dead;      /* also read atomically by send() */
    size_t dead_cap;

    ps__po_barrier_wait_t bar[PS__NUM_GROUPS];

    /* The job's id: the scheduler's issued, a node's learned (written once
     * under lock when the table arrives). */
    char job_id[PS_JOB_ID_MAX + 1];
    int auth_enabled;     /* connections prove the job secret (set at start) */

    /* ---- the scheduler ---- */
    ps__scheduler_state_t sched;

    /* ---- a server or worker (under lock unless noted) ---- */
    int table_received;   /* the scheduler's table (or failure) arrived */
    ps_status_t start_failure;
    char start_reason[512];
    int sched_conn_lost;  /* before ready: the scheduler connection failed */
    int sched_gone;       /* after ready: the scheduler is lost for good */
    int released;         /* finalize barrier done; losses are expected */
    uint64_t sched_seen_ns; /* last message from the scheduler (atomic: the van thread) */
    int recovered;        /* this process took over a dead node's id */
    char job_id_claim[PS_JOB_ID_MAX + 1]; /* its PS_JOB_ID ("" = none; set at start) */

    /* Peers whose connection failed (not declared dead yet), and how
     * their requests were failed: a send to one says the same. */
    int *lost_ids;
    ps_status_t *lost_why;
    size_t num_lost;
    size_t cap_lost;

    /* ---- the timer thread (postoffice_timer.c; flags under lock) ---- */
    ps_thread_t timer;
    int timer_started;
    int timer_stop;
    int timer_kick;

    int closing;             /* atomic: van close in progress; ignore callbacks */

    /* ---- node-event callbacks (postoffice_events.c): cb_lock guards them
     * and cb_running; never held while calling one ---- */
    ps_mutex_t cb_lock;
    ps_cond_t cb_cond;
    ps__po_node_cb_t failed_cbs[PS_NODE_CALLBACKS_MAX];
    size_t num_failed_cbs;
    ps__po_node_cb_t recovered_cbs[PS_NODE_CALLBACKS_MAX];
    size_t num_recovered_cbs;
    int cb_running;

    /* ---- PS_RESEND / PS_DROP_MSG, the small lane (set at start, then
     * read-only unless noted) ---- */
    ps__resender_t *res;       /* NULL: off */
    ps__profile_t *profile;    /* ENABLE_PROFILING; NULL: off */
    int drop_pct;
    /* The small lane (ps_postoffice_send_lane): the van's op, and the
     * payload bytes a lane message may carry (0: no lane). */
    ps_status_t (*send_lane)(ps_van_t *van, int recver, uint8_t *bytes, size_t len);
    size_t lane_max;
    uint64_t drop_rng;         /* atomic */
    uint64_t num_dropped;      /* atomic */
};

static inline int ps__po_closing(const ps_postoffice_t *po)
{
    return __atomic_load_n(&po->closing, __ATOMIC_ACQUIRE);
}

static inline int ps__po_my_id(const ps_postoffice_t *po)
{
    return __atomic_load_n(&po->my_id, __ATOMIC_ACQUIRE);
}

/* Nodes of each role: groups x instances (params count groups). */
static inline int ps__po_server_nodes(const ps_postoffice_t *po)
{
    return po->params.num_servers * po->params.group_size;
}

static inline int ps__po_worker_nodes(const ps_postoffice_t *po)
{
    return po->params.num_workers * po->params.group_size;
}

/* One line for PS_VERBOSE=2 (debug) logs about a message sent or received. */
void ps__po_log_msg_line(const char *dir, const ps_msg_t *msg);
static inline void ps__po_log_msg(const char *dir, const ps_msg_t *msg)
{
    if (ps_likely(ps__log_level < PS_LOG_DEBUG))
        return;
    ps__po_log_msg_line(dir, msg);
}

/* ---- postoffice.c ---- */

/* Scheduler: waits until `expected` nodes disconnected (or died), up to
 * `deadline`. */
void ps__po_linger(ps_postoffice_t *po, size_t expected, ps_deadline_t deadline);

/* ---- postoffice_nodes.c (the _locked ones under po->lock) ---- */

/* Index of a node id in the table (servers by rank, workers, scheduler),
 * or -1. */
int ps__po_table_index(const ps_postoffice_t *po, int id);
/* Is `id` in the group (PS_GROUP_* bits); the group's name for logs. */
int ps__po_group_has(int group, int id);
const char *ps__po_group_name(int group);
/* "worker 9 (rank 0)", or "the scheduler", in buf. */
const char *ps__po_id_describe(int id, char *buf, size_t cap);
/* A growable list of ids: is `id` in it; add it (no-op if present), 0 on
 * no memory. */
int ps__po_ids_has(const int *ids, size_t n, int id);
int ps__po_ids_add(int **ids, size_t *n, size_t *cap, int id);
/* Is `id` dead; mark it so; forget that it was (recovery); is a member of
 * `group` dead. */
int ps__po_is_dead_locked(const ps_postoffice_t *po, int id);
void ps__po_add_dead_locked(ps_postoffice_t *po, int id);
void ps__po_remove_dead_locked(ps_postoffice_t *po, int id);
int ps__po_group_has_dead_locked(const ps_postoffice_t *po, int group);
/* Records (or forgets, why == PS_OK) how the connection to `id` failed;
 * how it did (PS_OK: it did not). */
void ps__po_set_lost_locked(ps_postoffice_t *po, int id, ps_status_t why);
ps_status_t ps__po_get_lost_locked(const ps_postoffice_t *po, int id);

/* ---- postoffice_control.c ---- */

/* Sends as this node, without more checks. */
ps_status_t ps__po_van_send(ps_postoffice_t *po, ps_msg_t *msg);
/* Sends a control message (nodes and body are borrowed for the call). */
ps_status_t ps__po_send_control(ps_postoffice_t *po, int recver, ps_control_cmd_t cmd,
                                int request, int head, int group, ps_node_t *nodes,
                                size_t num_nodes, const char *body);
/* A control message's node list, and its body as text (cut to cap). */
const ps_node_t *ps__msg_nodes(const ps_msg_t *msg, size_t *n_p);
void ps__msg_body(const ps_msg_t *msg, char *buf, size_t cap);
/* The callbacks the van is opened with. */
void ps__po_van_callbacks(ps_postoffice_t *po, ps_van_callbacks_t *cb_p);

/* ---- postoffice_barrier.c ---- */

/* Waits in the barrier of `group` until every member reached it, up to
 * `deadline`; `what` names it in the logs. */
ps_status_t ps__po_barrier_until(ps_postoffice_t *po, int group, ps_deadline_t deadline,
                                 const char *what);
/* Scheduler: `id` reached the barrier of `group`. */
void ps__po_sched_barrier_arrive(ps_postoffice_t *po, int id, int group);
/* Ends this node's wait in `group` with `status` (and the reason). */
void ps__po_barrier_release(ps_postoffice_t *po, int group, ps_status_t status,
                            const char *reason);

/* ---- postoffice_failure.c ---- */

/* Node: the scheduler declared `id` dead. */
void ps__po_mark_dead(ps_postoffice_t *po, int id);
/* Node: the scheduler is unreachable or silent (`why`). */
void ps__po_lost_scheduler(ps_postoffice_t *po, const char *why);
/* Scheduler: declares node `id` dead and tells everyone. */
void ps__po_sched_declare_dead(ps_postoffice_t *po, int id, const char *why);
/* Node side: `node` (with its id) was taken over by a new process. */
void ps__po_node_recovered(ps_postoffice_t *po, const ps_node_t *node);
/* The van's peer_failed callback. */
void ps__po_cb_peer_failed(void *arg, int node_id, ps_status_t why);

/* ---- postoffice_timer.c ---- */

void *ps__po_timer_main(void *arg);
/* Wakes the timer thread (it recomputes when to run next). */
void ps__po_kick(ps_postoffice_t *po);

/* ---- postoffice_events.c ---- */

/* Runs the node-failed (why < 0) or node-recovered (PS_OK) callbacks. */
void ps__po_fire_node_event(ps_postoffice_t *po, int id, ps_status_t why);

/* ---- postoffice_resend.c ---- */

/* PS_RESEND, PS_RESEND_TIMEOUT and PS_DROP_MSG, read at start. */
ps_status_t ps__po_setup_resend(ps_postoffice_t *po);
/* Acknowledges a received data message. */
void ps__po_send_ack(ps_postoffice_t *po, const ps_meta_t *meta);
/* PS_DROP_MSG: 1 if this received data message is to be dropped. */
int ps__po_drop_on_purpose(ps_postoffice_t *po);
/* Resends what is due, gives up on what ran out of retries; returns when
 * the next resend is due (monotonic ns) or 0. */
uint64_t ps__po_resend_poll(ps_postoffice_t *po, uint64_t now_ns);

/* ---- bootstrap.c ---- */

/* Checks what a program (or the environment) asked for; logs what is wrong. */
ps_status_t ps__po_check_params(const ps_start_params_t *p);
/* The job's identity: the scheduler issues the job id (PS_JOB_ID, else a
 * random one) and reads PS_ALLOW_RECOVERY; a node reads the PS_JOB_ID it
 * may claim when it registers late. PS_ERR_CONFIG for a malformed id. */
ps_status_t ps__po_setup_identity(ps_postoffice_t *po);
/* The address this node binds and advertises (DMLC_NODE_HOST, else the
 * address of DMLC_INTERFACE, else the first usable one). */
ps_status_t ps__po_select_host(const ps_start_params_t *p, char *host, size_t cap);
/* Joins the job: the scheduler accepts every node and sends the table; a
 * server or worker registers, learns its id and connects to its peers. */
ps_status_t ps__po_sched_start(ps_postoffice_t *po, ps_deadline_t deadline);
ps_status_t ps__po_node_start(ps_postoffice_t *po, ps_deadline_t deadline);
/* ADD_NODE from the van: a registration (scheduler) or the table (node). */
void ps__po_sched_on_add_node(ps_postoffice_t *po, const ps_msg_t *msg);
void ps__po_node_on_add_node(ps_postoffice_t *po, const ps_msg_t *msg);
/* In a registration's or the node table's body, after the job shape: the
 * job id a node claims, or the one the scheduler issued. */
#define PS__JOB_KEY " job="
/* The job id after PS__JOB_KEY in a message body, or "". */
void ps__po_body_job_id(const char *body, char *out, size_t cap);
/* Scheduler: PS_OK, or PS_ERR_CONFIG with why: the registering node's job
 * shape differs from the scheduler's. */
ps_status_t ps__po_sched_check_shape(const ps_postoffice_t *po, const ps_msg_t *msg,
                                     const ps_node_t *node, char *why, size_t cap);
/* Scheduler: answers a node it will not take (status, why). */
void ps__po_sched_refuse(ps_postoffice_t *po, const ps_node_t *node, ps_status_t status,
                         const char *why);

/* ---- postoffice_recovery.c ---- */

/* Scheduler: a node registers after the table was complete. */
void ps__po_sched_on_late_add_node(ps_postoffice_t *po, const ps_msg_t *msg,
                                   const ps_node_t *node);
/* Scheduler: a node was just declared dead; a late registration waiting
 * for one of its role may take it over now. */
void ps__po_sched_try_recover(ps_postoffice_t *po);
/* Scheduler: refuses late registrations that waited too long; returns
 * when the next one expires (monotonic ns) or 0. */
uint64_t ps__po_sched_expire_late(ps_postoffice_t *po, uint64_t now_ns);

#endif /* PS_NET_POSTOFFICE_STATE_INTERNAL_H_ */
