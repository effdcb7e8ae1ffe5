/*
 * The libfabric endpoints this process has open, by address.
 *
 * A same-host peer is followed by its process (pidfd, fabric_van.c): shm
 * spins or faults on the region of a peer that is gone, so nothing is
 * posted to it. A peer in this very process (tests, or a program running
 * a worker and a server side by side) never looks gone that way, yet when
 * its van closes, its endpoint's region goes with it — and libfabric
 * 1.17's shm faults in pthread_spin_lock on the next post to it (the
 * endpoints of one process share their peers' mappings). So a van lists
 * its endpoint here while it is open, and a peer of our own pid is gone
 * once its address is no longer listed. A post to such a peer holds the
 * list (read) from that check to the post's return, and a closing van
 * takes its endpoint off the list (write) before it closes it: the check
 * and the post see the same endpoint.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ps/rdma/fabric/fabric_internal.h"

typedef struct {
    size_t len;
    uint8_t addr[PS_NODE_ENDPOINT_MAX];
} local_ep_t;

static pthread_rwlock_t g_lock = PTHREAD_RWLOCK_INITIALIZER;
static local_ep_t *g_eps;
static size_t g_num, g_cap;

static ssize_t find_locked(const void *addr, size_t len)
{
    for (size_t i = 0; i < g_num; i++) {
        if (g_eps[i].len == len && memcmp(g_eps[i].addr, addr, len) == 0)
            return (ssize_t)i;
    }
    return -1;
}

ps_status_t ps__fab_local_add(const void *addr, size_t len)
{
    if (len > PS_NODE_ENDPOINT_MAX)
        return PS_ERR_INVALID_ARG;
    pthread_rwlock_wrlock(&g_lock);
    if (g_num == g_cap) {
        size_t cap = g_cap ? 2 * g_cap : 4;
        local_ep_t *eps = realloc(g_eps, cap * sizeof(*eps));
        if (eps == NULL) {
            pthread_rwlock_unlock(&g_lock);
            return PS_ERR_NO_MEMORY;
        }
        g_eps = eps;
        g_cap = cap;
    }
    g_eps[g_num].len = len;
    memcpy(g_eps[g_num].addr, addr, len);
    g_num++;
    pthread_rwlock_unlock(&g_lock);
    return PS_OK;
}

void ps__fab_local_remove(const void *addr, size_t len)
{
    pthread_rwlock_wrlock(&g_lock);
    ssize_t i = find_locked(addr, len);
    if (i >= 0)
        g_eps[i] = g_eps[--g_num];
    if (g_num == 0) {
        free(g_eps);
        g_eps = NULL;
        g_cap = 0;
    }
    pthread_rwlock_unlock(&g_lock);
}

int ps__fab_local_open(const void *addr, size_t len)
{
    pthread_rwlock_rdlock(&g_lock);
    int open = find_locked(addr, len) >= 0;
    pthread_rwlock_unlock(&g_lock);
    return open;
}

int ps__fab_local_hold(const void *addr, size_t len)
{
    pthread_rwlock_rdlock(&g_lock);
    if (find_locked(addr, len) >= 0)
        return 1;
    pthread_rwlock_unlock(&g_lock);
    return 0;
}

void ps__fab_local_release(void)
{
    pthread_rwlock_unlock(&g_lock);
}
