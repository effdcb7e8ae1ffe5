/*
 * The postoffice's timer thread: heartbeats to the scheduler (a node),
 * declaring silent nodes dead (the scheduler), and the expiries others
 * keep: messages waiting for an unknown customer, PS_RESEND's resends,
 * late registrations. It sleeps on a condition variable until the next
 * one is due: an idle process uses no CPU.
 */
#include <stdint.h>
#include <stdio.h>

#include "ps/base/thread.h"
#include "ps/base/time.h"
#include "ps/net/postoffice_state_internal.h"

void ps__po_kick(ps_postoffice_t *po)
{
    ps_mutex_lock(&po->lock);
    po->timer_kick = 1;
    ps_cond_signal(&po->timer_cond);
    ps_mutex_unlock(&po->lock);
}

void *ps__po_timer_main(void *arg)
{
    ps_postoffice_t *po = arg;
    uint64_t interval_ns = (uint64_t)po->params.heartbeat_interval_s * PS_NSEC_PER_SEC;
    uint64_t timeout_ns = (uint64_t)po->params.heartbeat_timeout_s * PS_NSEC_PER_SEC;
    uint64_t next_heartbeat = 0;

    ps_mutex_lock(&po->lock);
    while (!po->timer_stop) {
        uint64_t now = ps_time_now_ns();
        uint64_t wake = UINT64_MAX;
        int send_heartbeat = 0;
        int lose_scheduler = 0;
        int dead_id = -1;
        uint64_t dead_silence = 0;

        if (po->ready && !po->is_scheduler && !po->sched_gone) {
            if (interval_ns > 0) {
                if (next_heartbeat == 0 || now >= next_heartbeat) {
                    send_heartbeat = 1;
                    next_heartbeat = now + interval_ns;
                }
                wake = next_heartbeat;
            }
            if (interval_ns > 0 && timeout_ns > 0 && !po->released) {
                uint64_t seen = __atomic_load_n(&po->sched_seen_ns, __ATOMIC_RELAXED);
                if (now > seen && now - seen > timeout_ns)
                    lose_scheduler = 1;
                else if (seen + timeout_ns + 1 < wake)
                    wake = seen + timeout_ns + 1;
            }
        }
        if (po->ready && po->is_scheduler && timeout_ns > 0 && po->sched.last_seen_ns != NULL) {
            for (size_t i = 0; i + 1 < po->num_nodes && dead_id < 0; i++) {
                int id = po->nodes[i].id;
                if (ps__po_is_dead_locked(po, id) ||
                    ps__po_ids_has(po->sched.left, po->sched.num_left, id))
                    continue;
                uint64_t seen = __atomic_load_n(&po->sched.last_seen_ns[i], __ATOMIC_RELAXED);
                if (now > seen && now - seen > timeout_ns) {
                    dead_id = id;
                    dead_silence = now - seen;
                }
            }
            if (now + PS__DEAD_SCAN_NS < wake)
                wake = now + PS__DEAD_SCAN_NS;
        }
        po->timer_kick = 0;
        ps_mutex_unlock(&po->lock);

        if (send_heartbeat)
            ps__po_send_control(po, PS_SCHEDULER_ID, PS_CTRL_HEARTBEAT, 1, 0, 0, &po->my_node, 1,
                                NULL);
        if (lose_scheduler) {
            char why[96];
            snprintf(why, sizeof(why), "no message from it for more than %d s",
                     po->params.heartbeat_timeout_s);
            ps__po_lost_scheduler(po, why);
        }
        if (dead_id >= 0) {
            char why[96];
            snprintf(why, sizeof(why), "no heartbeat for %.1f s (PS_HEARTBEAT_TIMEOUT is %d s)",
                     (double)dead_silence / 1e9, po->params.heartbeat_timeout_s);
            ps__po_sched_declare_dead(po, dead_id, why);
        }
        uint64_t pending = ps__registry_expire_pending(po->reg, ps_time_now_ns());
        if (pending != 0 && pending < wake)
            wake = pending;
        if (po->res != NULL) {
            uint64_t due = ps__po_resend_poll(po, ps_time_now_ns());
            if (due != 0 && due < wake)
                wake = due;
        }
        if (po->is_scheduler) {
            uint64_t late = ps__po_sched_expire_late(po, ps_time_now_ns());
            if (late != 0 && late < wake)
                wake = late;
        }

        ps_mutex_lock(&po->lock);
        if (po->timer_stop || po->timer_kick || dead_id >= 0 || lose_scheduler)
            continue;
        (void)ps_cond_wait(&po->timer_cond, &po->lock,
                           wake == UINT64_MAX ? ps_deadline_infinite() : ps_deadline_at_ns(wake));
    }
    ps_mutex_unlock(&po->lock);
    return NULL;
}
