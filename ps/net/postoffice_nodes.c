/*
 * The postoffice's view of the job's nodes: where an id sits in the node
 * table, which groups hold it, and which nodes are dead (declared so by
 * the scheduler) or lost (a failed connection, no verdict yet).
 */
#include <stdio.h>
#include <stdlib.h>

#include "ps/net/postoffice_state_internal.h"

static int role_group_bit(ps_role_t role)
{
    switch (role) {
    case PS_ROLE_SCHEDULER:
        return PS_GROUP_SCHEDULER;
    case PS_ROLE_SERVER:
        return PS_GROUP_SERVER;
    case PS_ROLE_WORKER:
        return PS_GROUP_WORKER;
    default:
        return 0;
    }
}

int ps__po_group_has(int group, int id)
{
    return (group & role_group_bit(ps_id_to_role(id))) != 0;
}

const char *ps__po_group_name(int group)
{
    static const char *names[PS__NUM_GROUPS] = {
        "none", "scheduler", "servers", "scheduler+servers",
        "workers", "scheduler+workers", "servers+workers", "all",
    };
    return group >= 0 && group < PS__NUM_GROUPS ? names[group] : "invalid";
}

/* "worker 9 (rank 0)" */
const char *ps__po_id_describe(int id, char *buf, size_t cap)
{
    if (id == PS_SCHEDULER_ID)
        snprintf(buf, cap, "the scheduler");
    else
        snprintf(buf, cap, "%s %d (rank %d)", ps_role_str(ps_id_to_role(id)), id,
                 ps_id_to_rank(id));
    return buf;
}

/* Index of a node id in the table, or -1. */
int ps__po_table_index(const ps_postoffice_t *po, int id)
{
    int servers = ps__po_server_nodes(po);
    if (id == PS_SCHEDULER_ID)
        return servers + ps__po_worker_nodes(po);
    if (id < PS_RANK_ID_BASE)
        return -1;
    int rank = ps_id_to_rank(id);
    if (ps_id_to_role(id) == PS_ROLE_SERVER)
        return rank < servers ? rank : -1;
    return rank < ps__po_worker_nodes(po) ? servers + rank : -1;
}

int ps__po_ids_has(const int *ids, size_t n, int id)
{
    for (size_t i = 0; i < n; i++) {
        if (ids[i] == id)
            return 1;
    }
    return 0;
}

/* Appends id to a growable int array (no-op if present); 0 on no memory. */
int ps__po_ids_add(int **ids, size_t *n, size_t *cap, int id)
{
    if (ps__po_ids_has(*ids, *n, id))
        return 1;
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 8;
        int *p = realloc(*ids, c * sizeof(*p));
        if (p == NULL)
            return 0;
        *ids = p;
        *cap = c;
    }
    (*ids)[(*n)++] = id;
    return 1;
}

int ps__po_is_dead_locked(const ps_postoffice_t *po, int id)
{
    return ps__po_ids_has(po->dead, po->num_dead, id);
}

void ps__po_remove_dead_locked(ps_postoffice_t *po, int id)
{
    for (size_t i = 0; i < po->num_dead; i++) {
        if (po->dead[i] == id) {
            po->dead[i] = po->dead[po->num_dead - 1];
            __atomic_store_n(&po->num_dead, po->num_dead - 1, __ATOMIC_RELEASE);
            return;
        }
    }
}

/* Records (or forgets, why == PS_OK) how the connection to `id` failed. */
void ps__po_set_lost_locked(ps_postoffice_t *po, int id, ps_status_t why)
{
    for (size_t i = 0; i < po->num_lost; i++) {
        if (po->lost_ids[i] != id)
            continue;
        if (why == PS_OK) {
            po->num_lost--;
            po->lost_ids[i] = po->lost_ids[po->num_lost];
            po->lost_why[i] = po->lost_why[po->num_lost];
        } else {
            po->lost_why[i] = why;
        }
        return;
    }
    if (why == PS_OK)
        return;
    if (po->num_lost == po->cap_lost) {
        size_t cap = po->cap_lost ? po->cap_lost * 2 : 8;
        int *ids = realloc(po->lost_ids, cap * sizeof(*ids));
        if (ids == NULL)
            return;
        po->lost_ids = ids;
        ps_status_t *w = realloc(po->lost_why, cap * sizeof(*w));
        if (w == NULL)
            return;
        po->lost_why = w;
        po->cap_lost = cap;
    }
    po->lost_ids[po->num_lost] = id;
    po->lost_why[po->num_lost] = why;
    po->num_lost++;
}

ps_status_t ps__po_get_lost_locked(const ps_postoffice_t *po, int id)
{
    for (size_t i = 0; i < po->num_lost; i++) {
        if (po->lost_ids[i] == id)
            return po->lost_why[i];
    }
    return PS_OK;
}

/* num_dead is also read without the lock (send's fast path). */
void ps__po_add_dead_locked(ps_postoffice_t *po, int id)
{
    int *ids = po->dead;
    size_t n = po->num_dead;
    size_t cap = po->dead_cap;
    if (ps__po_ids_add(&ids, &n, &cap, id)) {
        po->dead = ids;
        po->dead_cap = cap;
        __atomic_store_n(&po->num_dead, n, __ATOMIC_RELEASE);
    }
}

int ps__po_group_has_dead_locked(const ps_postoffice_t *po, int group)
{
    for (size_t i = 0; i < po->num_dead; i++) {
        if (ps__po_group_has(group, po->dead[i]))
            return 1;
    }
    return 0;
}
