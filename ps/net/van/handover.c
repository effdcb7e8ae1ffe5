#include "ps/net/van/handover.h"

ps_status_t ps_van_handover_init(ps_van_handover_t *h)
{
    h->start = h->close = NULL;
    return pthread_mutex_init(&h->lock, NULL) == 0 ? PS_OK : PS_ERR_NO_RESOURCE;
}

void ps_van_handover_fini(ps_van_handover_t *h)
{
    pthread_mutex_destroy(&h->lock);
}

static void push(ps_van_handover_link_t **head, ps_van_handover_link_t *const *links, int n)
{
    for (int i = 0; i < n; ++i) {
        links[i]->next = *head;
        /* Released: ps_van_handover_waiting reads the heads without the lock. */
        __atomic_store_n(head, links[i], __ATOMIC_RELEASE);
    }
}

void ps_van_handover_put(ps_van_handover_t *h, ps_van_handover_link_t *const *start, int nstart,
                         ps_van_handover_link_t *const *close, int nclose)
{
    pthread_mutex_lock(&h->lock);
    push(&h->start, start, nstart);
    push(&h->close, close, nclose);
    pthread_mutex_unlock(&h->lock);
}

int ps_van_handover_waiting(const ps_van_handover_t *h)
{
    return __atomic_load_n(&h->start, __ATOMIC_ACQUIRE) != NULL ||
           __atomic_load_n(&h->close, __ATOMIC_ACQUIRE) != NULL;
}

int ps_van_handover_take(ps_van_handover_t *h, ps_van_handover_link_t **start_p,
                         ps_van_handover_link_t **close_p)
{
    *start_p = *close_p = NULL;
    if (!ps_van_handover_waiting(h))
        return 0;
    pthread_mutex_lock(&h->lock);
    *start_p = h->start;
    *close_p = h->close;
    __atomic_store_n(&h->start, NULL, __ATOMIC_RELAXED);
    __atomic_store_n(&h->close, NULL, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&h->lock);
    return 1;
}

ps_van_handover_link_t *ps_van_handover_reverse(ps_van_handover_link_t *list)
{
    ps_van_handover_link_t *rev = NULL;
    while (list != NULL) {
        ps_van_handover_link_t *l = list;
        list = l->next;
        l->next = rev;
        rev = l;
    }
    return rev;
}
