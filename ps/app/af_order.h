/*
 * The AF server's reorder buffer for one worker: batches are numbered from
 * 0 by the worker; messages of several batches may arrive interleaved or
 * out of order. The buffer keeps the batches being assembled in a window
 * of PS__AF_ORDER_WINDOW sequence numbers from the next one to deliver,
 * and hands out complete batches strictly in sequence. Not thread-safe
 * (the server holds its lock). Pure: no networking.
 */
#ifndef PS_APP_AF_ORDER_H_
#define PS_APP_AF_ORDER_H_

#include <stdint.h>

#include "ps/base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PS__AF_ORDER_WINDOW 64

typedef struct {
    uint64_t next; /* the sequence number delivered next */
    void *item[PS__AF_ORDER_WINDOW];
    uint8_t complete[PS__AF_ORDER_WINDOW];
} ps__af_order_t;

void ps__af_order_init(ps__af_order_t *o);
/* The slot of batch `seq` (*slot_p: NULL when nothing is there yet; the
 * caller stores its item). PS_ERR_PROTOCOL for a seq already delivered or
 * beyond the window (a peer that skips numbers or runs too far ahead). */
ps_status_t ps__af_order_slot(ps__af_order_t *o, uint64_t seq, void ***slot_p);
/* Batch `seq` (in the window, with an item) has all its messages. */
void ps__af_order_mark_complete(ps__af_order_t *o, uint64_t seq);
/* The next batch in sequence when it is complete (its slot emptied, next
 * advanced), else NULL. */
void *ps__af_order_pop(ps__af_order_t *o);
/* Empties the buffer, calling drop(arg, item) on every item. */
void ps__af_order_clear(ps__af_order_t *o, void (*drop)(void *arg, void *item), void *arg);

#ifdef __cplusplus
}
#endif

#endif /* PS_APP_AF_ORDER_H_ */
