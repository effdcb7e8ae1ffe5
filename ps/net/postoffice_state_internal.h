/*
 * The postoffice's state, shared by the files of the postoffice inside
 * //ps/net: postoffice.c (callbacks, barriers, heartbeats and failures,
 * finalize, the API) and bootstrap.c (joining the job: registration, id
 * assignment, the node table). Nothing outside ps/net includes this.
 *
 * Locking: po->lock guards the fields marked so; it is never held while
 * calling the van or the registry (a van may call back synchronously).
 */
#ifndef PS_NET_POSTOFFICE_STATE_INTERNAL_H_
#define PS_NET_POSTOFFICE_STATE_INTERNAL_H_

#include <stddef.h>
#include <stdint.h>

#include "ps/base/status.h"
#include "ps/base/thread.h"
#include "ps/base/time.h"
#include "ps/net/codec/message.h"
#include "ps/net/message.h"
#include "ps/net/postoffice.h"
#include "ps/net/postoffice_internal.h"
#include "ps/net/profile_internal.h"
#include "ps/net/resender_internal.h"
#include "ps/net/van/van.h"

#define PS__NUM_GROUPS 8
/* Ids for nodes the scheduler must answer before ids exist (a failed
 * start): no real id is in use yet, so any valid node id will do. */
#define PS__TEMP_ID_BASE 8
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

    /* ---- under lock ---- */
    int ready;            /* node table known and connections made */
    int table_received;   /* node: the scheduler's table (or failure) arrived */
    ps_status_t start_failure;
    char start_reason[512];
    int sched_conn_lost;  /* node, before ready: the scheduler connection failed */
    int sched_gone;       /* node, after ready: the scheduler is lost for good */
    int finalizing;
    int released;         /* node: finalize barrier done; losses are expected */

    ps_node_t *reg_nodes; /* scheduler: registrations so far */
    size_t num_reg;
    size_t cap_reg;

    ps_node_t *nodes;     /* the table: servers by rank, workers by rank, scheduler */
    size_t num_nodes;

    int *dead;
    size_t num_dead;      /* also read atomically by send() */
    size_t dead_cap;

    int *left;            /* scheduler, finalizing: nodes that disconnected */
    size_t num_left;
    size_t left_cap;

    ps__po_barrier_wait_t bar[PS__NUM_GROUPS];
    ps__po_barrier_arrivals_t arrivals[PS__NUM_GROUPS];

    /* heartbeats (atomic: written by the van thread) */
    uint64_t *last_seen_ns;  /* scheduler: per table index */
    uint64_t sched_seen_ns;  /* node: last message from the scheduler */

    ps_thread_t timer;
    int timer_started;
    int timer_stop;
    int timer_kick;

    int closing;             /* atomic: van close in progress; ignore callbacks */

    /* ---- failure handling and recovery (under lock unless noted) ---- */
    int recovered;           /* node: this process took over a dead node's id */
    ps__po_late_t *late;     /* scheduler: late registrations waiting */
    size_t num_late;
    size_t cap_late;
    int refuse_seq;          /* scheduler: next refusal id offset */
    ps_status_t sched_verdict; /* scheduler, starting: a registration made
                                * the start impossible (PS_ERR_CONFIG) */
    char sched_verdict_reason[512];
    size_t num_told;         /* scheduler, failed start: nodes told why */
    size_t num_refused;      /* scheduler: registrations refused so far */
    char last_refusal[512];  /* scheduler: why the last one was */

    /* The job's identity (set at start, then read-only, except a node's
     * job_id, written once under lock when the table arrives). */
    char job_id[PS_JOB_ID_MAX + 1];   /* scheduler: issued; node: learned */
    int job_id_given;                 /* scheduler: from PS_JOB_ID */
    char job_id_claim[PS_JOB_ID_MAX + 1]; /* node: its PS_JOB_ID ("" = none) */
    int64_t job_started_s;            /* scheduler: wall-clock start (Unix s) */
    uint64_t job_started_ns;          /* scheduler: monotonic start */
    int auth_enabled;                 /* connections prove the job secret */
    int allow_recovery;               /* scheduler: PS_ALLOW_RECOVERY */

    /* Node: peers whose connection failed (not declared dead yet), and how
     * their requests were failed: a send to one says the same. */
    int *lost_ids;
    ps_status_t *lost_why;
    size_t num_lost;
    size_t cap_lost;

    /* Node-event callbacks: cb_lock guards them and cb_running; never held
     * while calling one. */
    ps_mutex_t cb_lock;
    ps_cond_t cb_cond;
    ps__po_node_cb_t failed_cbs[PS_NODE_CALLBACKS_MAX];
    size_t num_failed_cbs;
    ps__po_node_cb_t recovered_cbs[PS_NODE_CALLBACKS_MAX];
    size_t num_recovered_cbs;
    int cb_running;

    /* PS_RESEND / PS_DROP_MSG (set at start, then read-only). */
    ps__resender_t *res;       /* NULL: off */
    ps__profile_t *profile;    /* ENABLE_PROFILING; NULL: off */
    int drop_pct;
    /* The small lane (ps_postoffice_send_lane): the van's op, and the
     * payload bytes a lane message may carry (0: no lane). Set at start. */
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

/* ---- postoffice.c ---- */

/* Sends a control message (nodes and body are borrowed for the call). */
ps_status_t ps__po_send_control(ps_postoffice_t *po, int recver, ps_control_cmd_t cmd,
                                int request, int head, int group, ps_node_t *nodes,
                                size_t num_nodes, const char *body);
/* A control message's node list, and its body as text (cut to cap). */
const ps_node_t *ps__msg_nodes(const ps_msg_t *msg, size_t *n_p);
void ps__msg_body(const ps_msg_t *msg, char *buf, size_t cap);
/* Scheduler: waits until `expected` nodes disconnected (or died), up to
 * `deadline`. */
void ps__po_linger(ps_postoffice_t *po, size_t expected, ps_deadline_t deadline);

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
/* Scheduler: node `id` was just declared dead; a late registration
 * waiting for one of its role may take it over now. */
void ps__po_sched_try_recover(ps_postoffice_t *po);
/* Scheduler: refuses late registrations that waited too long; returns
 * when the next one expires (monotonic ns) or 0. */
uint64_t ps__po_sched_expire_late(ps_postoffice_t *po, uint64_t now_ns);

/* ---- postoffice.c, for bootstrap.c ---- */

/* Index of a node id in the table (servers by rank, workers, scheduler),
 * or -1. */
int ps__po_table_index(const ps_postoffice_t *po, int id);
/* Under lock: is `id` dead; forget that it was (recovery). */
int ps__po_is_dead_locked(const ps_postoffice_t *po, int id);
void ps__po_remove_dead_locked(ps_postoffice_t *po, int id);
/* Scheduler: declares node `id` dead and tells everyone. */
void ps__po_sched_declare_dead(ps_postoffice_t *po, int id, const char *why);
/* Wakes the timer thread (it recomputes when to run next). */
void ps__po_kick(ps_postoffice_t *po);
/* Runs the node-failed / node-recovered callbacks. */
void ps__po_fire_node_event(ps_postoffice_t *po, int id, ps_status_t why);
/* Node side: `node` (with its id) was taken over by a new process. */
void ps__po_node_recovered(ps_postoffice_t *po, const ps_node_t *node);

#endif /* PS_NET_POSTOFFICE_STATE_INTERNAL_H_ */
