/*
 * The scheduler's side of recovery (upstream's is_recovery): a
 * registration after the table is complete is a restarted process if it
 * proves it belongs to the job (the job secret, the job id the scheduler
 * issued given back as PS_JOB_ID, or PS_ALLOW_RECOVERY on the scheduler);
 * any other is refused at once, so that a second job on the same port
 * never takes a rank. It takes over a dead node of its role (its
 * preferred rank's, if it has one): the scheduler records it in that
 * node's slot, tells every other live node (ADD_NODE with the node marked
 * is_recovery; they reconnect to it), then sends the new process the nodes
 * still dead (NODE_FAILED) and the table with its own entry marked. When
 * no node of its role is dead yet (its predecessor may be hung, not gone:
 * it is declared dead only after PS_HEARTBEAT_TIMEOUT), it waits in a
 * bounded list; one that waited PS_HEARTBEAT_TIMEOUT + 2 s is refused as a
 * node too many. A registration from the address of a node thought alive
 * proves that node's process gone.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ps/base/log.h"
#include "ps/base/thread.h"
#include "ps/base/time.h"
#include "ps/net/node_table_internal.h"
#include "ps/net/postoffice_state_internal.h"

/* Scheduler: 1 when a node registering after the job started may take over
 * a dead node: it proved the job secret (every connection did), carries the
 * job's id, or the job allows anyone. Else 0 and `why`, naming the job. */
static int sched_late_may_recover(const ps_postoffice_t *po, const ps_msg_t *msg, char *why,
                                  size_t cap)
{
    if (po->auth_enabled || po->sched.allow_recovery)
        return 1;
    char body[256];
    char claim[PS_JOB_ID_MAX + 1];
    ps__msg_body(msg, body, sizeof(body));
    ps__po_body_job_id(body, claim, sizeof(claim));
    if (claim[0] != '\0' && strcmp(claim, po->job_id) == 0)
        return 1;
    char when[32] = "?";
    time_t t = (time_t)po->sched.job_started_s;
    struct tm tm;
    if (gmtime_r(&t, &tm) != NULL)
        strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", &tm);
    uint64_t ago_s = (ps_time_now_ns() - po->sched.job_started_ns) / PS_NSEC_PER_SEC;
    char claimed[PS_JOB_ID_MAX + 48] = "";
    if (claim[0] != '\0')
        snprintf(claimed, sizeof(claimed), " (its PS_JOB_ID=%s is not this job's)", claim);
    snprintf(why, cap, "the scheduler at %s:%d already runs job %s (%d servers, %d workers, "
             "started %s, %llu s ago) and this node does not belong to it%s: a node that joins "
             "a running job must prove it with PS_JOB_ID or the job secret. A new job needs "
             "its own DMLC_PS_ROOT_PORT", po->params.scheduler_host, po->params.scheduler_port,
             po->job_id, po->params.num_servers, po->params.num_workers, when,
             (unsigned long long)ago_s, claimed);
    return 0;
}

static int node_port(const ps_node_t *node)
{
    return node->num_ports > 0 ? node->ports[0] : 0;
}

/* Scheduler: a node registers after the table was complete. It may take
 * over a dead node of its role (recovery); if none is dead yet, it waits
 * for one, bounded (see postoffice.h). */
void ps__po_sched_on_late_add_node(ps_postoffice_t *po, const ps_msg_t *msg,
                                   const ps_node_t *node)
{
    char who[PS_NODE_HOSTNAME_MAX + 48];
    char why[1024];
    ps__node_describe(node, who, sizeof(who));
    if (node->role != PS_ROLE_SERVER && node->role != PS_ROLE_WORKER) {
        ps_warn(PS_LOG_CORE, "ignoring a registration of a %s", ps_role_str(node->role));
        return;
    }
    if (ps__po_sched_check_shape(po, msg, node, why, sizeof(why)) != PS_OK) {
        ps_error(PS_LOG_CORE, "refusing %s: %s", who, why);
        ps__po_sched_refuse(po, node, PS_ERR_CONFIG, why);
        return;
    }
    /* Before anything else it could change (a live node declared dead for
     * its address): a stranger must never take a rank. */
    if (!sched_late_may_recover(po, msg, why, sizeof(why))) {
        ps_warn(PS_LOG_CORE, "refusing %s, registering after the job started: %s", who, why);
        ps__po_sched_refuse(po, node, PS_ERR_CONFIG, why);
        return;
    }

    ps_mutex_lock(&po->lock);
    if (po->finalizing) {
        ps_mutex_unlock(&po->lock);
        ps_warn(PS_LOG_CORE, "refusing %s: the job is finishing", who);
        ps__po_sched_refuse(po, node, PS_ERR_SHUTDOWN, "the job is finishing: it takes no new node");
        return;
    }
    /* A live node at this very address cannot be: its process is gone and
     * the port was taken again (by this new process). */
    int stale = -1;
    int idx = ps__node_table_find(po->nodes, po->num_nodes, node->hostname, node_port(node));
    if (idx >= 0 && po->nodes[idx].id != PS_SCHEDULER_ID &&
        !ps__po_is_dead_locked(po, po->nodes[idx].id))
        stale = po->nodes[idx].id;
    ps_mutex_unlock(&po->lock);
    if (stale >= 0)
        ps__po_sched_declare_dead(po, stale, "a new process registered at its address");

    uint64_t wait_ms = (uint64_t)po->params.heartbeat_timeout_s * 1000u +
                       PS__RECOVERY_WAIT_GRACE_MS;
    int queued = 1;
    ps_mutex_lock(&po->lock);
    size_t i = 0;
    while (i < po->sched.num_late &&
           ps__node_table_find(&po->sched.late[i].node, 1, node->hostname, node_port(node)) < 0)
        i++;
    if (i == po->sched.num_late) {
        /* At most one waiting per node of the job: more are refused. */
        size_t limit = po->num_nodes > 0 ? po->num_nodes : 1;
        if (po->sched.num_late >= limit) {
            queued = 0;
        } else if (po->sched.num_late == po->sched.cap_late) {
            size_t cap = po->sched.cap_late ? po->sched.cap_late * 2 : 4;
            ps__po_late_t *l = realloc(po->sched.late, cap * sizeof(*l));
            if (l == NULL) {
                queued = 0;
            } else {
                po->sched.late = l;
                po->sched.cap_late = cap;
            }
        }
        if (queued)
            po->sched.num_late++;
    }
    if (queued) {
        po->sched.late[i].node = *node;
        po->sched.late[i].expires_ns = ps_time_now_ns() + wait_ms * PS_NSEC_PER_MSEC;
    }
    ps_mutex_unlock(&po->lock);
    if (!queued) {
        snprintf(why, sizeof(why), "too many late registrations wait already");
        ps_error(PS_LOG_CORE, "refusing %s: %s", who, why);
        ps__po_sched_refuse(po, node, PS_ERR_CONFIG, why);
        return;
    }
    ps__po_sched_try_recover(po);

    ps_mutex_lock(&po->lock);
    int still = 0;
    for (size_t j = 0; j < po->sched.num_late; j++)
        still |= ps__node_table_find(&po->sched.late[j].node, 1, node->hostname,
                                     node_port(node)) >= 0;
    ps_mutex_unlock(&po->lock);
    if (still) {
        ps_info(PS_LOG_CORE, "%s registered after the job started and no %s is dead: it may "
                "take over one declared dead within %llu ms", who, ps_role_str(node->role),
                (unsigned long long)wait_ms);
        ps__po_kick(po); /* the timer expires it */
    }
}

/* A dead node of `role` a new process may take over, or -1: of the rank
 * or instance the registration's aux_id asks for, if any. Under lock. */
static int sched_dead_of_role_locked(ps_postoffice_t *po, ps_role_t role, int aux)
{
    int best = -1;
    for (size_t i = 0; i < po->num_dead; i++) {
        int id = po->dead[i];
        if (ps_id_to_role(id) != role || ps__po_table_index(po, id) < 0)
            continue;
        if (aux >= 0 && ps_id_to_rank(id) != aux)
            continue;
        if (aux < PS_NODE_AUX_ANY &&
            ps_id_to_rank(id) % po->params.group_size != PS_NODE_AUX_INSTANCE_OF(aux))
            continue;
        if (best < 0 || id < best)
            best = id;
    }
    return best;
}

void ps__po_sched_try_recover(ps_postoffice_t *po)
{
    char who[PS_NODE_HOSTNAME_MAX + 48];
    for (;;) {
        ps_mutex_lock(&po->lock);
        if (!po->ready || po->finalizing || po->sched.num_late == 0) {
            ps_mutex_unlock(&po->lock);
            return;
        }
        size_t li = 0;
        int id = -1;
        while (li < po->sched.num_late) {
            id = sched_dead_of_role_locked(po, po->sched.late[li].node.role,
                                           po->sched.late[li].node.aux_id);
            if (id >= 0)
                break;
            li++;
        }
        if (id < 0) {
            ps_mutex_unlock(&po->lock);
            return;
        }
        ps_node_t node = po->sched.late[li].node;
        po->sched.late[li] = po->sched.late[--po->sched.num_late];
        int idx = ps__po_table_index(po, id);
        node.id = id;
        node.is_recovery = false;
        po->nodes[idx] = node;
        ps__po_remove_dead_locked(po, id);
        uint64_t *seen = __atomic_load_n(&po->sched.last_seen_ns, __ATOMIC_ACQUIRE);
        if (seen != NULL)
            __atomic_store_n(&seen[idx], ps_time_now_ns(), __ATOMIC_RELAXED);
        size_t n = po->num_nodes;
        ps_node_t *table = malloc(n * sizeof(*table));
        int *others = malloc(n * sizeof(*others));
        ps_node_t *dead = malloc(n * sizeof(*dead));
        size_t num_others = 0;
        size_t num_dead = 0;
        if (table != NULL && others != NULL && dead != NULL) {
            memcpy(table, po->nodes, n * sizeof(*table));
            for (size_t i = 0; i < n; i++) {
                int nid = po->nodes[i].id;
                if (nid == PS_SCHEDULER_ID || nid == id)
                    continue;
                if (ps__po_is_dead_locked(po, nid))
                    dead[num_dead++] = po->nodes[i];
                else
                    others[num_others++] = nid;
            }
        }
        ps_cond_broadcast(&po->cond);
        ps_mutex_unlock(&po->lock);

        ps__node_describe(&node, who, sizeof(who));
        ps_status_t st = table != NULL && others != NULL && dead != NULL ? PS_OK
                                                                         : PS_ERR_NO_MEMORY;
        if (st == PS_OK)
            st = po->van->ops->connect(po->van, &node, PS_SCHEDULER_ID);
        if (st != PS_OK) {
            free(table);
            free(others);
            free(dead);
            char why[PS_NODE_HOSTNAME_MAX + 160];
            snprintf(why, sizeof(why), "the new process for it (%s) cannot be reached: %s", who,
                     ps_status_str(st));
            ps__po_sched_declare_dead(po, id, why);
            continue;
        }
        ps__registry_revive_peer(po->reg, id);
        /* The others first: they reconnect to it while it learns the
         * table, so that its first messages find them ready. */
        ps_node_t rec = node;
        rec.is_recovery = true;
        for (size_t i = 0; i < num_others; i++)
            ps__po_send_control(po, others[i], PS_CTRL_ADD_NODE, 0, 0, 0, &rec, 1, NULL);
        for (size_t i = 0; i < num_dead; i++)
            ps__po_send_control(po, id, PS_CTRL_NODE_FAILED, 0, PS_ERR_PEER_GONE, 0, &dead[i], 1,
                                "dead before this node joined");
        table[idx].is_recovery = true;
        char job[sizeof(PS__JOB_KEY) + PS_JOB_ID_MAX];
        snprintf(job, sizeof(job), "%s", &PS__JOB_KEY[1]);
        snprintf(job + strlen(job), sizeof(job) - strlen(job), "%s", po->job_id);
        ps__po_send_control(po, id, PS_CTRL_ADD_NODE, 0, 0, 0, table, n, job);
        free(table);
        free(others);
        free(dead);
        ps_warn(PS_LOG_CORE, "%s took over node %d (%s rank %d): recovered; told %zu other "
                "nodes", who, id, ps_role_str(node.role), ps_id_to_rank(id), num_others);
        ps__po_fire_node_event(po, id, PS_OK);
    }
}

uint64_t ps__po_sched_expire_late(ps_postoffice_t *po, uint64_t now_ns)
{
    char who[PS_NODE_HOSTNAME_MAX + 48];
    char why[256];
    for (;;) {
        uint64_t next = 0;
        int found = 0;
        int n = 0;
        ps_node_t node;
        ps_node_init(&node);
        ps_mutex_lock(&po->lock);
        for (size_t i = 0; i < po->sched.num_late; i++) {
            if (po->sched.late[i].expires_ns <= now_ns) {
                node = po->sched.late[i].node;
                po->sched.late[i] = po->sched.late[--po->sched.num_late];
                found = 1;
                n = node.role == PS_ROLE_SERVER ? ps__po_server_nodes(po)
                                                : ps__po_worker_nodes(po);
                break;
            }
            if (next == 0 || po->sched.late[i].expires_ns < next)
                next = po->sched.late[i].expires_ns;
        }
        ps_mutex_unlock(&po->lock);
        if (!found)
            return next;
        snprintf(why, sizeof(why), "all %d %ss of the job are alive: nothing for this %s to "
                 "take over (a node too many? check DMLC_NUM_%s)", n, ps_role_str(node.role),
                 ps_role_str(node.role), node.role == PS_ROLE_SERVER ? "SERVER" : "WORKER");
        ps_error(PS_LOG_CORE, "refusing %s: %s", ps__node_describe(&node, who, sizeof(who)),
                 why);
        ps__po_sched_refuse(po, &node, PS_ERR_CONFIG, why);
    }
}
