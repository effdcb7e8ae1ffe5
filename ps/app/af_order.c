/*
 * The AF server's per-worker reorder buffer (af_order.h).
 */
#include "ps/app/af_order.h"

#include <string.h>

void ps__af_order_init(ps__af_order_t *o)
{
    memset(o, 0, sizeof(*o));
}

ps_status_t ps__af_order_slot(ps__af_order_t *o, uint64_t seq, void ***slot_p)
{
    if (seq < o->next || seq - o->next >= PS__AF_ORDER_WINDOW)
        return PS_ERR_PROTOCOL;
    *slot_p = &o->item[seq % PS__AF_ORDER_WINDOW];
    return PS_OK;
}

void ps__af_order_mark_complete(ps__af_order_t *o, uint64_t seq)
{
    if (seq >= o->next && seq - o->next < PS__AF_ORDER_WINDOW)
        o->complete[seq % PS__AF_ORDER_WINDOW] = 1;
}

void *ps__af_order_pop(ps__af_order_t *o)
{
    unsigned i = (unsigned)(o->next % PS__AF_ORDER_WINDOW);
    if (!o->complete[i] || o->item[i] == NULL)
        return NULL;
    void *item = o->item[i];
    o->item[i] = NULL;
    o->complete[i] = 0;
    o->next++;
    return item;
}

void ps__af_order_clear(ps__af_order_t *o, void (*drop)(void *arg, void *item), void *arg)
{
    for (unsigned i = 0; i < PS__AF_ORDER_WINDOW; i++) {
        if (o->item[i] != NULL && drop != NULL)
            drop(arg, o->item[i]);
        o->item[i] = NULL;
        o->complete[i] = 0;
    }
}
