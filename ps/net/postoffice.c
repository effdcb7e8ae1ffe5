/*
 * The postoffice: starting and finalizing it, and the public API. Its
 * parts are in files of their own, around the state they share
 * (postoffice_state_internal.h):
 *  - bootstrap.c: joining the job (registration, id assignment, the node
 *    table);
 *  - postoffice_recovery.c: late registrations taking over dead nodes;
 *  - postoffice_control.c: sending control messages, the van's callbacks;
 *  - postoffice_barrier.c: barriers;
 *  - postoffice_failure.c: dead and lost nodes, recovered ones;
 *  - postoffice_timer.c: heartbeats, silent nodes, expiries;
 *  - postoffice_nodes.c: the node table's ids, groups, the dead and lost;
 *  - postoffice_events.c: the node-event callbacks;
 *  - postoffice_resend.c: PS_RESEND and PS_DROP_MSG.
 *
 * Threads:
 *  - the caller's thread runs start, barriers and finalize (the blocking
 *    parts: connecting, waiting for the node table);
 *  - the van's thread calls deliver / recv_buffer / peer_failed: control
 *    messages are handled there without blocking, data messages go to
 *    their customer inline (ps__registry_deliver);
 *  - one timer thread sends heartbeats, declares silent nodes dead
 *    (scheduler) and expires messages waiting for an unknown customer.
 *    It sleeps on a condition variable: an idle process uses no CPU.
 */
#include "ps/net/postoffice.h"
#include "ps/net/postoffice_msg.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps/base/config.h"
#include "ps/base/log.h"
#include "ps/base/thread.h"
#include "ps/base/time.h"
#include "ps/net/auth.h"
#include "ps/net/node_table_internal.h"
#include "ps/net/postoffice_state_internal.h"
#include "ps/net/van/progress_loop.h"

/* The registry's kick: messages wait for a customer, the timer expires them. */
static void po_kick_timer(void *arg)
{
    ps__po_kick(arg);
}

/* ---- teardown ---- */

/* Frees the postoffice once nothing runs in it; PS_ERR_TIMED_OUT (and
 * nothing freed) when a busy-poll waiter still ran the van's loop at
 * `deadline`. */
static ps_status_t po_free(ps_postoffice_t *po, ps_deadline_t deadline)
{
    if (po->timer_started) {
        ps_mutex_lock(&po->lock);
        po->timer_stop = 1;
        ps_cond_signal(&po->timer_cond);
        ps_mutex_unlock(&po->lock);
        ps_thread_join(&po->timer, NULL);
        po->timer_started = 0;
    }
    __atomic_store_n(&po->closing, 1, __ATOMIC_RELEASE);
    if (po->reg != NULL && ps__registry_stop_driving(po->reg, deadline) != PS_OK) {
        /* Its thread is inside the van (say, in a receive function that
         * blocks): closing the van, or freeing the registry it leaves
         * through, would pull them from under it. Outstanding requests
         * fail; the van, the registry and the postoffice stay. */
        ps__registry_close(po->reg, PS_ERR_SHUTDOWN);
        ps_error(PS_LOG_CORE, "a busy-poll waiter still runs the van's loop at the deadline; "
                 "leaving the van open and the postoffice allocated");
        return PS_ERR_TIMED_OUT;
    }
    const uint64_t abandoned = ps_van_loop_abandon_count();
    if (po->van != NULL)
        po->van->ops->close(po->van);
    if (ps_van_loop_abandon_count() != abandoned) {
        /* The van's thread was left stuck inside it (logged), with the van:
         * its callbacks lead here, so the registry and the postoffice stay. */
        po->van = NULL;
        if (po->reg != NULL)
            ps__registry_close(po->reg, PS_ERR_SHUTDOWN);
        ps_error(PS_LOG_CORE, "the van's progress thread is stuck inside it; leaving the "
                 "postoffice allocated");
        return PS_ERR_TIMED_OUT;
    }
    po->van = NULL;
    if (po->reg != NULL)
        ps__registry_destroy(po->reg);
    ps__resender_destroy(po->res);
    ps__profile_close(po->profile);
    free(po->sched.late);
    for (int g = 0; g < PS__NUM_GROUPS; g++)
        free(po->sched.arrivals[g].ids);
    free(po->sched.reg_nodes);
    free(po->nodes);
    free(po->dead);
    free(po->sched.left);
    free(po->lost_ids);
    free(po->lost_why);
    free(po->sched.last_seen_ns);
    ps_cond_destroy(&po->cb_cond);
    ps_mutex_destroy(&po->cb_lock);
    ps_cond_destroy(&po->timer_cond);
    ps_cond_destroy(&po->cond);
    ps_mutex_destroy(&po->lock);
    free(po);
    return PS_OK;
}

/* ---- the scheduler leaves last ---- */

/* Waits until `expected` nodes disconnected (or died), up to `deadline`:
 * the scheduler leaves last, so that what it sent last (the final barrier
 * release, a start failure) is read before its connections close. */
void ps__po_linger(ps_postoffice_t *po, size_t expected, ps_deadline_t deadline)
{
    ps_mutex_lock(&po->lock);
    while (po->sched.num_left + po->num_dead < expected) {
        if (ps_cond_wait(&po->cond, &po->lock, deadline) == PS_ERR_TIMED_OUT)
            break;
    }
    size_t left = po->sched.num_left;
    ps_mutex_unlock(&po->lock);
    ps_debug(PS_LOG_CORE, "%zu of %zu nodes disconnected before the scheduler left", left,
             expected);
}

/* ---- public API ---- */

/* PS_SMALL_LANE: on where the van has a send_lane op, unless every data
 * message must pass the resender or the dropper (which see messages). */
static ps_status_t po_setup_lane(ps_postoffice_t *po)
{
    int on = 1;
    ps_status_t st = ps_config_get_bool(PS_CFG_PS_SMALL_LANE, &on);
    if (st != PS_OK && st != PS_ERR_NOT_FOUND)
        return PS_ERR_CONFIG;
    po->send_lane = ps_van_send_lane_op(po->van);
    po->lane_max = 0;
    if (on && po->send_lane != NULL && po->res == NULL && po->drop_pct == 0 &&
        !po->is_scheduler)
        po->lane_max = PS_LANE_MAX_PAYLOAD;
    ps_debug(PS_LOG_CORE, "small lane %s", po->lane_max ? "on" : "off");
    return PS_OK;
}


ps_status_t ps_postoffice_start(const ps_start_params_t *params, int do_barrier,
                                ps_postoffice_t **po_p)
{
    ps_start_params_t p;
    ps_status_t st;

    if (po_p == NULL)
        return PS_ERR_INVALID_ARG;
    /* A value that does not parse stops the start, whatever reads it later
     * (the getters with a fallback would only log it and go on). */
    if (ps_config_validate() != PS_OK) {
        ps_error(PS_LOG_CORE, "not starting: fix or unset the variables named above");
        return PS_ERR_CONFIG;
    }
    if (params == NULL) {
        st = ps_start_params_from_env(&p);
        if (st != PS_OK)
            return st;
    } else {
        p = *params;
    }
    p.scheduler_host[sizeof(p.scheduler_host) - 1] = '\0';
    p.node_host[sizeof(p.node_host) - 1] = '\0';
    p.interface[sizeof(p.interface) - 1] = '\0';
    p.van[sizeof(p.van) - 1] = '\0';
    if (p.group_size == 0) /* a struct zeroed instead of ps_start_params_init() */
        p.group_size = 1;
    if ((st = ps__po_check_params(&p)) != PS_OK)
        return st;

    /* The van, by name: unknown or unusable names are reported by the
     * registry with the list of vans compiled in. */
    const char *van_name = p.van;
    if (van_name[0] == '\0' && (st = ps_van_select_name(&van_name)) != PS_OK)
        return st;
    const ps_van_component_t *comp = NULL;
    if ((st = ps_van_find(van_name, &comp)) != PS_OK)
        return st;
    snprintf(p.van, sizeof(p.van), "%s", comp->name);

    ps_postoffice_t *po = calloc(1, sizeof(*po));
    if (po == NULL)
        return PS_ERR_NO_MEMORY;
    po->params = p;
    po->van_comp = comp;
    po->is_scheduler = p.role == PS_ROLE_SCHEDULER;
    po->my_id = po->is_scheduler ? PS_SCHEDULER_ID : PS_NODE_EMPTY;
    if (ps_mutex_init(&po->lock) != PS_OK) {
        free(po);
        return PS_ERR_NO_MEMORY;
    }
    if (ps_cond_init(&po->cond) != PS_OK) {
        ps_mutex_destroy(&po->lock);
        free(po);
        return PS_ERR_NO_MEMORY;
    }
    if (ps_cond_init(&po->timer_cond) != PS_OK) {
        ps_cond_destroy(&po->cond);
        ps_mutex_destroy(&po->lock);
        free(po);
        return PS_ERR_NO_MEMORY;
    }
    if (ps_mutex_init(&po->cb_lock) != PS_OK) {
        ps_cond_destroy(&po->timer_cond);
        ps_cond_destroy(&po->cond);
        ps_mutex_destroy(&po->lock);
        free(po);
        return PS_ERR_NO_MEMORY;
    }
    if (ps_cond_init(&po->cb_cond) != PS_OK) {
        ps_mutex_destroy(&po->cb_lock);
        ps_cond_destroy(&po->timer_cond);
        ps_cond_destroy(&po->cond);
        ps_mutex_destroy(&po->lock);
        free(po);
        return PS_ERR_NO_MEMORY;
    }
    st = ps__registry_create(p.role, po_kick_timer, po, &po->reg);
    if (st != PS_OK)
        goto err;
    if ((st = ps__profile_open(ps_role_str(p.role), &po->profile)) != PS_OK)
        goto err;
    if ((st = ps__po_setup_resend(po)) != PS_OK)
        goto err;
    if ((st = ps__po_setup_identity(po)) != PS_OK)
        goto err;

    ps_deadline_t deadline = ps_deadline_from_ms(p.start_timeout_ms);

    /* This node's address. */
    ps_node_init(&po->my_node);
    po->my_node.role = p.role;
    po->my_node.num_ports = 1;
    po->my_node.dev_types[0] = PS_DEV_CPU;
    if (po->is_scheduler) {
        po->my_node.id = PS_SCHEDULER_ID;
        snprintf(po->my_node.hostname, sizeof(po->my_node.hostname), "%s", p.scheduler_host);
        po->my_node.ports[0] = p.scheduler_port;
        ps_log_set_prefix("scheduler");
    } else {
        st = ps__po_select_host(&p, po->my_node.hostname, sizeof(po->my_node.hostname));
        if (st != PS_OK)
            goto err;
        po->my_node.ports[0] = p.port;
        po->my_node.aux_id = p.preferred_rank >= 0 ? p.preferred_rank
                             : p.instance >= 0 && p.group_size > 1
                                 ? PS_NODE_AUX_INSTANCE(p.instance)
                                 : PS_NODE_AUX_ANY;
        ps_log_set_prefix(ps_role_str(p.role));
    }

    /* Open and bind the van. */
    ps_van_params_t vp;
    memset(&vp, 0, sizeof(vp));
    vp.role = p.role;
    vp.is_scheduler = po->is_scheduler;
    /* The scheduler carries control messages only: a spinning scheduler
     * would take a core from the workers and servers it serves. */
    vp.busy_poll = p.busy_poll && !po->is_scheduler;
    vp.conns_per_peer = (int)ps_config_int_or(PS_CFG_DMLC_NUM_PORTS, 1);
    vp.max_meta_bytes = ps_config_size_or(PS_CFG_PS_MAX_META_BYTES, 1u << 20);
    vp.max_message_bytes = ps_config_size_or(PS_CFG_PS_MAX_MESSAGE_BYTES, 4ull << 30);
    vp.max_data_segments = (uint32_t)ps_config_int_or(PS_CFG_PS_MAX_DATA_SEGMENTS, 16);
    vp.connect_timeout_ms = (int)ps_config_int_or(PS_CFG_PS_CONNECT_TIMEOUT_MS, 10000);
    vp.bind_any = ps_config_bool_or(PS_CFG_PS_BIND_ANY, 0) ||
                  (po->is_scheduler && ps_config_bool_or(PS_CFG_DMLC_USE_KUBERNETES, 0));
    /* The job secret, read once here (ps/net/auth.h); the van copies it. */
    if ((st = ps_auth_load(&vp.auth_key, &vp.auth_enabled)) != PS_OK)
        goto err;
    po->auth_enabled = vp.auth_enabled;
    if (vp.auth_enabled) {
        /* A van that does not run the handshake would let anyone in: with
         * a secret set, only the vans that check it may start. */
        static const char *const auth_vans[] = {"tcp", "shm", "ipc", "ucx", "fabric",
                                                "ibverbs"};
        int can = 0;
        for (size_t i = 0; i < sizeof(auth_vans) / sizeof(auth_vans[0]); i++)
            can |= strcmp(comp->name, auth_vans[i]) == 0;
        if (!can) {
            ps_error(PS_LOG_CORE, "PS_JOB_SECRET is set, but the %s van cannot check it yet; "
                     "use the tcp van or unset the secret", comp->name);
            st = PS_ERR_UNSUPPORTED;
            goto err;
        }
        ps_info(PS_LOG_CORE, "job secret set: every connection must prove it holds it");
    }
    ps_van_callbacks_t cb;
    ps__po_van_callbacks(po, &cb);
    st = comp->ops->open(&vp, &cb, &po->van);
    ps_auth_key_wipe(&vp.auth_key);
    if (st != PS_OK)
        goto err;
    if ((st = po->van->ops->query(po->van, &po->attr)) != PS_OK)
        goto err;
    if ((st = po_setup_lane(po)) != PS_OK)
        goto err;
    if (po->is_scheduler && (st = po->van->ops->set_node_id(po->van, PS_SCHEDULER_ID)) != PS_OK)
        goto err;
    int retries = po->is_scheduler || p.port != 0
                      ? 0
                      : (int)ps_config_int_or(PS_CFG_PS_BIND_RETRIES, 40);
    if ((st = po->van->ops->bind(po->van, &po->my_node, retries)) != PS_OK) {
        if (po->is_scheduler && st == PS_ERR_ADDRESS_IN_USE)
            ps_error(PS_LOG_CORE, "the scheduler cannot listen on %s:%d: the port is taken (by "
                     "another job's scheduler?); give this job another DMLC_PS_ROOT_PORT",
                     p.scheduler_host, p.scheduler_port);
        goto err;
    }
    char who[PS_NODE_HOSTNAME_MAX + 48];
    ps_info(PS_LOG_CORE, "%s listening (van %s)",
            ps__node_describe(&po->my_node, who, sizeof(who)), comp->name);

    if ((st = ps_thread_create("ps-po-timer", PS_THREAD_NO_CPU, ps__po_timer_main, po,
                               &po->timer)) != PS_OK)
        goto err;
    po->timer_started = 1;

    if (po->is_scheduler) {
        ps_info(PS_LOG_CORE, "job %s: waiting for %d servers and %d workers to register "
                "(a node restarted later proves it belongs to the job with PS_JOB_ID=%s%s)",
                po->job_id, ps__po_server_nodes(po), ps__po_worker_nodes(po), po->job_id,
                po->auth_enabled ? " or the job secret" : "");
        if (p.heartbeat_timeout_s > 0)
            ps_info(PS_LOG_CORE, "nodes silent for %d s are declared dead; they must send "
                    "heartbeats (PS_HEARTBEAT_INTERVAL)", p.heartbeat_timeout_s);
        st = ps__po_sched_start(po, deadline);
    } else {
        st = ps__po_node_start(po, deadline);
    }
    if (st != PS_OK)
        goto err;

    if (po->recovered) {
        /* As upstream: the others passed the start barrier long ago. */
        ps_info(PS_LOG_CORE, "took over node %d from a dead process; skipping the start barrier",
                ps__po_my_id(po));
    } else if (do_barrier) {
        int ms = ps_deadline_remaining_ms(deadline);
        ps_deadline_t bd = ms < 0 ? ps_deadline_infinite() : ps_deadline_from_ms(ms > 0 ? ms : 1);
        st = ps__po_barrier_until(po, PS_GROUP_ALL, bd, "start barrier");
        if (st != PS_OK)
            goto err;
    }
    *po_p = po;
    return PS_OK;

err:
    (void)po_free(po, ps_deadline_from_ms(PS__DRIVERS_MIN_MS));
    return st;
}

ps_status_t ps_postoffice_finalize(ps_postoffice_t *po, int do_barrier)
{
    if (po == NULL)
        return PS_ERR_INVALID_ARG;
    /* The barrier waits for the job's end (or a death, which ends it at
     * once) when finalize_timeout_ms is -1; what follows it is bounded. */
    ps_deadline_t deadline = ps_deadline_from_ms(po->params.finalize_timeout_ms);
    ps_deadline_t teardown = ps_deadline_from_ms(ps_postoffice_finalize_timeout_ms(po));
    ps_status_t st = PS_OK;

    ps_mutex_lock(&po->lock);
    po->finalizing = 1;
    int ready = po->ready && !po->sched_gone;
    int lost = po->ready && po->sched_gone;
    ps_cond_broadcast(&po->cond); /* ps_postoffice_wait_alive() ends */
    ps_mutex_unlock(&po->lock);

    if (do_barrier && ready) {
        st = ps__po_barrier_until(po, PS_GROUP_ALL, deadline, "finalize barrier");
        if (st != PS_OK)
            ps_warn(PS_LOG_CORE, "leaving without the other nodes: %s", ps_status_str(st));
    } else if (do_barrier && lost) {
        /* No finalize barrier without the scheduler: the job did not end
         * together, whichever way this node learned it first. */
        st = PS_ERR_PEER_GONE;
        ps_warn(PS_LOG_CORE, "leaving without the other nodes: the scheduler is gone");
    }
    ps_mutex_lock(&po->lock);
    po->released = 1;
    ps_mutex_unlock(&po->lock);
    if (po->drop_pct > 0 || po->res != NULL) {
        uint64_t dropped = __atomic_load_n(&po->num_dropped, __ATOMIC_RELAXED);
        uint64_t resent = po->res != NULL ? ps__resender_num_resent(po->res) : 0;
        uint64_t dups = po->res != NULL ? ps__resender_num_duplicates(po->res) : 0;
        if (po->drop_pct > 0)
            ps_warn(PS_LOG_CORE, "PS_DROP_MSG=%d: %llu received data messages dropped on purpose; "
                    "PS_RESEND: %llu resent, %llu duplicates dropped", po->drop_pct,
                    (unsigned long long)dropped, (unsigned long long)resent,
                    (unsigned long long)dups);
        else
            ps_info(PS_LOG_CORE, "PS_RESEND: %llu resent, %llu duplicates dropped",
                    (unsigned long long)resent, (unsigned long long)dups);
    }
    if (po->is_scheduler && ready && do_barrier && st == PS_OK) {
        ps_deadline_t linger = ps_deadline_min(teardown, ps_deadline_from_ms(PS__LINGER_MS));
        ps__po_linger(po, po->num_nodes > 0 ? po->num_nodes - 1 : 0, linger);
    }
    /* However long the barrier took, drivers get a moment to hand the
     * van's loop back. */
    ps_deadline_t drivers = ps_deadline_from_ms(PS__DRIVERS_MIN_MS);
    if (ps_deadline_is_infinite(deadline) ||
        ps_deadline_remaining_ns(deadline) > ps_deadline_remaining_ns(drivers))
        drivers = ps_deadline_is_infinite(deadline) ? teardown : deadline;
    if (po_free(po, drivers) != PS_OK)
        return PS_ERR_TIMED_OUT;
    ps_info(PS_LOG_CORE, "finalized");
    return st;
}

int ps_postoffice_my_id(const ps_postoffice_t *po)
{
    return ps__po_my_id(po);
}

int ps_postoffice_my_rank(const ps_postoffice_t *po)
{
    return ps_id_to_rank(ps__po_my_id(po));
}

ps_role_t ps_postoffice_role(const ps_postoffice_t *po)
{
    return po->params.role;
}

int ps_postoffice_num_workers(const ps_postoffice_t *po)
{
    return po->params.num_workers;
}

int ps_postoffice_num_servers(const ps_postoffice_t *po)
{
    return po->params.num_servers;
}

int ps_postoffice_group_size(const ps_postoffice_t *po)
{
    return po->params.group_size;
}

int ps_postoffice_instance(const ps_postoffice_t *po)
{
    int id = ps__po_my_id(po);
    if (id < PS_RANK_ID_BASE)
        return 0;
    return ps_id_to_rank(id) % po->params.group_size;
}

int ps_postoffice_peer_id(const ps_postoffice_t *po, ps_role_t role, int group_rank)
{
    int groups = role == PS_ROLE_SERVER   ? po->params.num_servers
                 : role == PS_ROLE_WORKER ? po->params.num_workers
                                          : 0;
    if (group_rank < 0 || group_rank >= groups)
        return -1;
    int rank = group_rank * po->params.group_size + ps_postoffice_instance(po);
    return role == PS_ROLE_SERVER ? ps_server_rank_to_id(rank) : ps_worker_rank_to_id(rank);
}

int ps_postoffice_peer_rank(const ps_postoffice_t *po, int id)
{
    int g = po->params.group_size;
    if (id < PS_RANK_ID_BASE)
        return -1;
    int nodes = ps_id_to_role(id) == PS_ROLE_SERVER ? ps__po_server_nodes(po)
                                                    : ps__po_worker_nodes(po);
    int rank = ps_id_to_rank(id);
    if (rank < 0 || rank >= nodes || rank % g != ps_postoffice_instance(po))
        return -1;
    return rank / g;
}

int ps_postoffice_request_timeout_ms(const ps_postoffice_t *po)
{
    return po->params.request_timeout_ms;
}

int ps_postoffice_finalize_timeout_ms(const ps_postoffice_t *po)
{
    int ms = po->params.finalize_timeout_ms;
    return ms >= 0 ? ms : PS_TEARDOWN_DEFAULT_MS;
}

int ps_postoffice_group_ids(const ps_postoffice_t *po, int group_or_id, int *ids, int cap)
{
    int n = 0;
    if (!ps_id_is_group(group_or_id)) {
        if (ps__po_table_index(po, group_or_id) < 0)
            return 0;
        if (cap > 0 && ids != NULL)
            ids[0] = group_or_id;
        return 1;
    }
    /* Ids follow from the counts (scheduler 1, servers 8 + 2r, workers
     * 9 + 2r), so this works before the table arrives too. */
    if (group_or_id & PS_GROUP_SCHEDULER) {
        if (n < cap && ids != NULL)
            ids[n] = PS_SCHEDULER_ID;
        n++;
    }
    if (group_or_id & PS_GROUP_SERVER) {
        for (int r = 0; r < ps__po_server_nodes(po); r++, n++) {
            if (n < cap && ids != NULL)
                ids[n] = ps_server_rank_to_id(r);
        }
    }
    if (group_or_id & PS_GROUP_WORKER) {
        for (int r = 0; r < ps__po_worker_nodes(po); r++, n++) {
            if (n < cap && ids != NULL)
                ids[n] = ps_worker_rank_to_id(r);
        }
    }
    return n;
}

ps_status_t ps_postoffice_server_key_range(const ps_postoffice_t *po, int server_rank,
                                           uint64_t *begin_p, uint64_t *end_p)
{
    int n = po->params.num_servers;
    if (server_rank < 0 || server_rank >= n || begin_p == NULL || end_p == NULL)
        return PS_ERR_INVALID_ARG;
    /* Upstream: [MAX / n * r, MAX / n * (r + 1)); the last range also takes
     * the few keys that rounding leaves above it. */
    uint64_t step = UINT64_MAX / (uint64_t)n;
    *begin_p = step * (uint64_t)server_rank;
    *end_p = server_rank == n - 1 ? UINT64_MAX : step * (uint64_t)(server_rank + 1);
    return PS_OK;
}

uint32_t ps_postoffice_capabilities(const ps_postoffice_t *po)
{
    return (uint32_t)po->attr.cap_flags;
}

const char *ps_postoffice_van_name(const ps_postoffice_t *po)
{
    return po->van_comp->name;
}

int ps_postoffice_peer_same_host(const ps_postoffice_t *po, int id)
{
    int (*same_host)(ps_van_t *, int) = po->van ? ps_van_same_host_op(po->van) : NULL;
    return same_host != NULL && same_host(po->van, id);
}

/* A van's send status as the postoffice reports it: no connection to the
 * peer (it failed, and the scheduler has not declared it dead yet) says
 * what the requests waiting for it were told. */
static ps_status_t po_send_status(ps_postoffice_t *po, int recver, ps_status_t st)
{
    if (st != PS_ERR_UNREACHABLE)
        return st;
    ps_mutex_lock(&po->lock);
    st = ps__po_is_dead_locked(po, recver) || (recver == PS_SCHEDULER_ID && po->sched_gone)
             ? PS_ERR_PEER_GONE
             : ps__po_get_lost_locked(po, recver);
    ps_mutex_unlock(&po->lock);
    return st == PS_OK ? PS_ERR_LINK_FAILED : st;
}

ps_status_t ps_postoffice_send(ps_postoffice_t *po, const ps_msg_t *msg)
{
    if (po == NULL || msg == NULL)
        return PS_ERR_INVALID_ARG;
    if (ps__po_closing(po))
        return PS_ERR_SHUTDOWN;
    int recver = msg->meta.recver;
    if (recver != PS_SCHEDULER_ID && recver < PS_RANK_ID_BASE) {
        ps_error(PS_LOG_CORE, "send: %d is not a node id", recver);
        return PS_ERR_INVALID_ARG;
    }
    if (__atomic_load_n(&po->num_dead, __ATOMIC_RELAXED) > 0) {
        ps_mutex_lock(&po->lock);
        int dead = ps__po_is_dead_locked(po, recver);
        ps_mutex_unlock(&po->lock);
        if (dead)
            return PS_ERR_PEER_GONE;
    }
    /* The van sends the message as from this node. The caller's message is
     * const: a copy (~800 bytes, the bulk of this function's cost) carries
     * the sender unless the caller has set it already. */
    int my_id = ps__po_my_id(po);
    const ps_msg_t *out = msg;
    ps_msg_t copy;
    if (msg->meta.sender != my_id) {
        copy = *msg;
        copy.meta.sender = my_id;
        out = &copy;
    }
    int tracked = 0;
    if (po->res != NULL && !ps_meta_is_control(&out->meta)) {
        /* Remembered before it leaves: its ACK may come back at once. */
        int kick = 0;
        ps_status_t ts = ps__resender_track(po->res, out, ps_time_now_ns(), &kick);
        if (ts == PS_OK)
            tracked = 1;
        else if (ts == PS_ERR_EXISTS)
            ps_warn_ratelimited(PS_LOG_CORE, "resend: a message to node %d with app %d customer "
                                "%d ts %d is still unacknowledged; this one with the same key "
                                "goes without resend", recver, out->meta.app_id,
                                out->meta.customer_id, out->meta.timestamp);
        if (kick)
            ps__po_kick(po);
    }
    ps__po_log_msg("send", out);
    ps_status_t st = po->van->ops->send(po->van, out);
    if (st != PS_OK && tracked)
        ps__resender_untrack(po->res, out);
    return po_send_status(po, recver, st);
}

size_t ps_postoffice_lane_max(const ps_postoffice_t *po)
{
    return po != NULL ? po->lane_max : 0;
}

ps_status_t ps_postoffice_send_lane(ps_postoffice_t *po, int recver, int app_id, int customer_id,
                                    uint8_t *payload, size_t len)
{
    if (po == NULL || payload == NULL || len > po->lane_max)
        return PS_ERR_INVALID_ARG;
    if (app_id < 0 || app_id > PS_LANE_MAX_ID || customer_id < 0 || customer_id > PS_LANE_MAX_ID)
        return PS_ERR_UNSUPPORTED; /* ids the lane header cannot carry */
    if (ps__po_closing(po))
        return PS_ERR_SHUTDOWN;
    if (recver < PS_RANK_ID_BASE) {
        ps_error(PS_LOG_CORE, "send_lane: %d is not the id of a server or worker", recver);
        return PS_ERR_INVALID_ARG;
    }
    if (__atomic_load_n(&po->num_dead, __ATOMIC_RELAXED) > 0) {
        ps_mutex_lock(&po->lock);
        int dead = ps__po_is_dead_locked(po, recver);
        ps_mutex_unlock(&po->lock);
        if (dead)
            return PS_ERR_PEER_GONE;
    }
    uint8_t *bytes = payload - PS_LANE_HDR_LEN;
    ps_lane_hdr_write(bytes, app_id, customer_id);
    if (ps_unlikely(PS_LOG_TRACE <= ps__log_level))
        ps_trace(PS_LOG_CORE, "send: lane message of %zu bytes to node %d (app %d customer %d)",
                 len, recver, app_id, customer_id);
    return po_send_status(po, recver, po->send_lane(po->van, recver, bytes,
                                                    PS_LANE_HDR_LEN + len));
}

void ps_postoffice_traffic(const ps_postoffice_t *po, uint64_t *sent_p, uint64_t *recv_p)
{
    uint64_t s = 0;
    uint64_t r = 0;
    if (po->van != NULL)
        po->van->ops->stats(po->van, &s, &r);
    if (sent_p != NULL)
        *sent_p = s;
    if (recv_p != NULL)
        *recv_p = r;
}

int ps_postoffice_dead_nodes(const ps_postoffice_t *po, int *ids, int cap)
{
    ps_postoffice_t *mpo = (ps_postoffice_t *)po; /* the lock, not the state, changes */
    ps_mutex_lock(&mpo->lock);
    int n = (int)po->num_dead;
    for (int i = 0; i < n && i < cap && ids != NULL; i++)
        ids[i] = po->dead[i];
    ps_mutex_unlock(&mpo->lock);
    return n;
}

const char *ps_postoffice_job_id(const ps_postoffice_t *po)
{
    if (po == NULL)
        return "";
    ps_postoffice_t *mpo = (ps_postoffice_t *)po; /* the lock, not the state, changes */
    ps_mutex_lock(&mpo->lock);
    const char *id = po->job_id; /* written once, before the node is ready */
    ps_mutex_unlock(&mpo->lock);
    return id;
}

int ps_postoffice_is_recovery(const ps_postoffice_t *po)
{
    ps_postoffice_t *mpo = (ps_postoffice_t *)po; /* the lock, not the state, changes */
    ps_mutex_lock(&mpo->lock);
    int r = po->recovered;
    ps_mutex_unlock(&mpo->lock);
    return r;
}

static int po_group_or_id_has_dead_locked(const ps_postoffice_t *po, int group_or_id)
{
    if (ps_id_is_group(group_or_id))
        return ps__po_group_has_dead_locked(po, group_or_id);
    return ps__po_is_dead_locked(po, group_or_id);
}

ps_status_t ps_postoffice_wait_alive(ps_postoffice_t *po, int group, int timeout_ms)
{
    if (po == NULL || group < 1 || (!ps_id_is_group(group) && ps__po_table_index(po, group) < 0))
        return PS_ERR_INVALID_ARG;
    if (timeout_ms < 0)
        timeout_ms = po->params.barrier_timeout_ms;
    ps_deadline_t deadline = ps_deadline_from_ms(timeout_ms);
    ps_status_t st = PS_OK;
    ps_mutex_lock(&po->lock);
    for (;;) {
        if (po->sched_gone) {
            st = PS_ERR_PEER_GONE;
            break;
        }
        if (po->finalizing) {
            st = PS_ERR_SHUTDOWN;
            break;
        }
        if (!po_group_or_id_has_dead_locked(po, group))
            break;
        if (ps_cond_wait(&po->cond, &po->lock, deadline) == PS_ERR_TIMED_OUT &&
            po_group_or_id_has_dead_locked(po, group)) {
            st = PS_ERR_TIMED_OUT;
            break;
        }
    }
    ps_mutex_unlock(&po->lock);
    if (st == PS_ERR_TIMED_OUT)
        ps_warn(PS_LOG_CORE, "no new process took over the dead nodes of %s %d within %d ms",
                ps_id_is_group(group) ? "group" : "node", group, timeout_ms);
    return st;
}

/* ---- internal accessors ---- */

void ps__postoffice_resend_stats(const ps_postoffice_t *po, uint64_t *resent_p,
                                 uint64_t *duplicates_p, uint64_t *dropped_p)
{
    *resent_p = po->res != NULL ? ps__resender_num_resent(po->res) : 0;
    *duplicates_p = po->res != NULL ? ps__resender_num_duplicates(po->res) : 0;
    *dropped_p = __atomic_load_n(&po->num_dropped, __ATOMIC_RELAXED);
}

ps__registry_t *ps__postoffice_registry(ps_postoffice_t *po)
{
    return po->reg;
}

int ps__postoffice_busy_poll(const ps_postoffice_t *po)
{
    return po->params.busy_poll;
}
