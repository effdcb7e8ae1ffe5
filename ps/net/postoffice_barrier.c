/*
 * Barriers: a node asks the scheduler (BARRIER request with the group),
 * the scheduler counts arrivals per group and answers each member once
 * every member arrived, or at once with why the barrier cannot complete
 * (a member is dead). The scheduler takes part through the same counts.
 */
#include "ps/net/postoffice.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps/base/log.h"
#include "ps/base/thread.h"
#include "ps/base/time.h"
#include "ps/net/postoffice_state_internal.h"

/* Members of `group` (PS_GROUP_* bits). */
static int group_size(const ps_postoffice_t *po, int group)
{
    return ((group & PS_GROUP_SCHEDULER) ? 1 : 0) +
           ((group & PS_GROUP_SERVER) ? ps__po_server_nodes(po) : 0) +
           ((group & PS_GROUP_WORKER) ? ps__po_worker_nodes(po) : 0);
}

void ps__po_barrier_release(ps_postoffice_t *po, int group, ps_status_t status,
                            const char *reason)
{
    ps_mutex_lock(&po->lock);
    po->bar[group].done_gen++;
    po->bar[group].status = status;
    snprintf(po->bar[group].reason, sizeof(po->bar[group].reason), "%s",
             reason != NULL ? reason : "");
    ps_cond_broadcast(&po->cond);
    ps_mutex_unlock(&po->lock);
}

/* Scheduler: `id` reached the barrier of `group`. */
void ps__po_sched_barrier_arrive(ps_postoffice_t *po, int id, int group)
{
    int *release = NULL;
    size_t num_release = 0;
    ps_status_t status = PS_OK;
    char body[160] = "";

    ps_mutex_lock(&po->lock);
    if (group < 1 || group >= PS__NUM_GROUPS || !ps__po_group_has(group, id) ||
        ps__po_table_index(po, id) < 0) {
        status = PS_ERR_INVALID_ARG;
        snprintf(body, sizeof(body), "node %d cannot enter a barrier of group %d", id, group);
    } else if (ps__po_group_has_dead_locked(po, group)) {
        status = PS_ERR_PEER_GONE;
        snprintf(body, sizeof(body), "barrier of group %s cannot complete: a member is dead",
                 ps__po_group_name(group));
    } else {
        ps__po_barrier_arrivals_t *a = &po->sched.arrivals[group];
        if (!ps__po_ids_add(&a->ids, &a->n, &a->cap, id)) {
            status = PS_ERR_NO_MEMORY;
            snprintf(body, sizeof(body), "out of memory in the barrier");
        } else if ((int)a->n >= group_size(po, group)) {
            release = malloc(a->n * sizeof(*release));
            if (release != NULL) {
                memcpy(release, a->ids, a->n * sizeof(*release));
                num_release = a->n;
            }
            a->n = 0;
        }
    }
    ps_mutex_unlock(&po->lock);

    if (status != PS_OK) {
        ps_warn(PS_LOG_CORE, "%s", body);
        if (id == PS_SCHEDULER_ID)
            ps__po_barrier_release(po, group < PS__NUM_GROUPS && group > 0 ? group : 0, status,
                                   body);
        else
            ps__po_send_control(po, id, PS_CTRL_BARRIER, 0, status, group, NULL, 0, body);
        return;
    }
    if (num_release > 0)
        ps_info(PS_LOG_CORE, "barrier of group %s released (%zu nodes)", ps__po_group_name(group),
                num_release);
    for (size_t i = 0; i < num_release; i++) {
        if (release[i] == PS_SCHEDULER_ID)
            ps__po_barrier_release(po, group, PS_OK, NULL);
        else
            ps__po_send_control(po, release[i], PS_CTRL_BARRIER, 0, PS_OK, group, NULL, 0, NULL);
    }
    free(release);
}

ps_status_t ps__po_barrier_until(ps_postoffice_t *po, int group, ps_deadline_t deadline,
                                 const char *what)
{
    if (group < 1 || group >= PS__NUM_GROUPS) {
        ps_error(PS_LOG_CORE, "barrier: %d is not a group (1 to 7)", group);
        return PS_ERR_INVALID_ARG;
    }
    ps_mutex_lock(&po->lock);
    if (!po->ready) {
        ps_mutex_unlock(&po->lock);
        ps_error(PS_LOG_CORE, "barrier: this node has not joined the job");
        return PS_ERR_BAD_STATE;
    }
    if (!ps__po_group_has(group, ps__po_my_id(po))) {
        ps_mutex_unlock(&po->lock);
        ps_error(PS_LOG_CORE, "barrier: this %s is not in group %s",
                 ps_role_str(po->params.role), ps__po_group_name(group));
        return PS_ERR_INVALID_ARG;
    }
    if (po->bar[group].busy) {
        ps_mutex_unlock(&po->lock);
        ps_error(PS_LOG_CORE, "barrier of group %s: another thread of this node is already "
                 "waiting in it", ps__po_group_name(group));
        return PS_ERR_BAD_STATE;
    }
    po->bar[group].busy = 1;
    uint64_t gen = po->bar[group].done_gen;
    ps_mutex_unlock(&po->lock);

    ps_status_t st = PS_OK;
    if (po->is_scheduler)
        ps__po_sched_barrier_arrive(po, PS_SCHEDULER_ID, group);
    else
        st = ps__po_send_control(po, PS_SCHEDULER_ID, PS_CTRL_BARRIER, 1, 0, group, NULL, 0, NULL);
    /* A scheduler that cannot be reached any more has left: the same answer
     * whether the send or the connection's failure tells us first. */
    if (st == PS_ERR_UNREACHABLE || st == PS_ERR_LINK_FAILED)
        st = PS_ERR_PEER_GONE;

    char reason[160] = "";
    ps_mutex_lock(&po->lock);
    while (st == PS_OK) {
        if (po->bar[group].done_gen != gen) {
            st = po->bar[group].status;
            memcpy(reason, po->bar[group].reason, sizeof(reason));
            break;
        }
        if (po->sched_gone) {
            st = PS_ERR_PEER_GONE;
            break;
        }
        if (ps__po_group_has_dead_locked(po, group)) {
            st = PS_ERR_PEER_GONE;
            break;
        }
        if (ps_cond_wait(&po->cond, &po->lock, deadline) == PS_ERR_TIMED_OUT &&
            po->bar[group].done_gen == gen) {
            st = PS_ERR_TIMED_OUT;
            break;
        }
    }
    po->bar[group].busy = 0;
    ps_mutex_unlock(&po->lock);

    if (st == PS_ERR_TIMED_OUT)
        ps_error(PS_LOG_CORE, "%s of group %s timed out: not every node reached it", what,
                 ps__po_group_name(group));
    else if (st != PS_OK)
        ps_error(PS_LOG_CORE, "%s of group %s failed: %s%s%s", what, ps__po_group_name(group),
                 ps_status_str(st), reason[0] ? ": " : "", reason);
    return st;
}

ps_status_t ps_postoffice_barrier(ps_postoffice_t *po, int group, int timeout_ms)
{
    if (po == NULL)
        return PS_ERR_INVALID_ARG;
    if (timeout_ms < 0)
        timeout_ms = po->params.barrier_timeout_ms;
    return ps__po_barrier_until(po, group, ps_deadline_from_ms(timeout_ms), "barrier");
}
