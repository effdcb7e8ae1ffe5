/*
 * What other threads hand a van's progress thread: connections to start
 * (connect() made them) and connections to close (disconnect() or a
 * replacing connect() took them from the peer table). Both lists sit
 * behind one lock; the progress thread takes both at once and deals with
 * each connection itself. A connection is on a list through a link of its
 * own (one per list), and each list holds the reference its putter gave.
 */
#ifndef PS_NET_VAN_HANDOVER_H_
#define PS_NET_VAN_HANDOVER_H_

#include <pthread.h>
#include <stddef.h>

#include "ps/base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ps_van_handover_link {
    struct ps_van_handover_link *next;
} ps_van_handover_link_t;

typedef struct ps_van_handover {
    pthread_mutex_t lock;
    ps_van_handover_link_t *start; /* newest first */
    ps_van_handover_link_t *close; /* newest first */
} ps_van_handover_t;

/* The connection a link of member `_member` belongs to. */
#define PS_VAN_HANDOVER_OF(_link, _type, _member) \
    ((_type *)(void *)((char *)(_link) - offsetof(_type, _member)))

ps_status_t ps_van_handover_init(ps_van_handover_t *h);
/* Both lists must be empty (taken) by then. */
void ps_van_handover_fini(ps_van_handover_t *h);

/* Under one lock: `nstart` links onto the start list and `nclose` onto
 * the close list (either count may be 0). */
void ps_van_handover_put(ps_van_handover_t *h, ps_van_handover_link_t *const *start, int nstart,
                         ps_van_handover_link_t *const *close, int nclose);

/* Whether either list holds something, without the lock (a put seen
 * late is seen on the progress thread's next turn: putters wake it). */
int ps_van_handover_waiting(const ps_van_handover_t *h);

/* Takes both lists (newest first; NULL when empty): 1, or 0 at once,
 * without the lock, when ps_van_handover_waiting says nothing waits. The
 * progress thread calls it every turn. */
int ps_van_handover_take(ps_van_handover_t *h, ps_van_handover_link_t **start_p,
                         ps_van_handover_link_t **close_p);

/* The first link of a taken list, off it; NULL at the end. */
static inline ps_van_handover_link_t *ps_van_handover_pop(ps_van_handover_link_t **list_p)
{
    ps_van_handover_link_t *l = *list_p;
    if (l != NULL) {
        *list_p = l->next;
        l->next = NULL;
    }
    return l;
}

/* Reverses a taken list (to handle the oldest first). */
ps_van_handover_link_t *ps_van_handover_reverse(ps_van_handover_link_t *list);

#ifdef __cplusplus
}
#endif

#endif /* PS_NET_VAN_HANDOVER_H_ */
