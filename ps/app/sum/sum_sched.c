#include "ps/app/sum/sum_sched.h"

#include <stdlib.h>

void ps__sum_queue_init(ps__sum_queue_t *q)
{
    q->head = q->tail = NULL;
    q->count = 0;
    q->heap_index = -1;
}

ps_status_t ps__sum_sched_init(ps__sum_sched_t *s, int priority)
{
    *s = (ps__sum_sched_t){.priority = priority != 0};
    return PS_OK;
}

void ps__sum_sched_fini(ps__sum_sched_t *s)
{
    free(s->heap);
    s->heap = NULL;
    s->heap_len = s->heap_cap = 0;
}

/* a goes before b: fewer counted pushes, then the older head push. */
static int before(const ps__sum_queue_t *a, const ps__sum_queue_t *b)
{
    if (a->count != b->count)
        return a->count < b->count;
    return a->head->id < b->head->id;
}

static void heap_set(ps__sum_sched_t *s, size_t i, ps__sum_queue_t *q)
{
    s->heap[i] = q;
    q->heap_index = (int)i;
}

static void sift_up(ps__sum_sched_t *s, size_t i)
{
    ps__sum_queue_t *q = s->heap[i];
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!before(q, s->heap[parent]))
            break;
        heap_set(s, i, s->heap[parent]);
        i = parent;
    }
    heap_set(s, i, q);
}

static void sift_down(ps__sum_sched_t *s, size_t i)
{
    ps__sum_queue_t *q = s->heap[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= s->heap_len)
            break;
        if (c + 1 < s->heap_len && before(s->heap[c + 1], s->heap[c]))
            c++;
        if (!before(s->heap[c], q))
            break;
        heap_set(s, i, s->heap[c]);
        i = c;
    }
    heap_set(s, i, q);
}

ps_status_t ps__sum_sched_push(ps__sum_sched_t *s, ps__sum_item_t *item)
{
    item->next = NULL;
    if (!s->priority) {
        if (s->fifo_tail)
            s->fifo_tail->next = item;
        else
            s->fifo_head = item;
        s->fifo_tail = item;
        s->size++;
        return PS_OK;
    }

    ps__sum_queue_t *q = item->queue;
    if (q->heap_index < 0 && s->heap_len == s->heap_cap) {
        size_t cap = s->heap_cap ? 2 * s->heap_cap : 64;
        ps__sum_queue_t **h = realloc(s->heap, cap * sizeof(*h));
        if (!h)
            return PS_ERR_NO_MEMORY;
        s->heap = h;
        s->heap_cap = cap;
    }
    if (q->tail)
        q->tail->next = item;
    else
        q->head = item;
    q->tail = item;
    q->count++;
    s->size++;
    if (q->heap_index < 0) {
        s->heap_len++;
        heap_set(s, s->heap_len - 1, q);
        sift_up(s, s->heap_len - 1);
    } else {
        sift_down(s, (size_t)q->heap_index); /* its count grew: it can only sink */
    }
    return PS_OK;
}

ps__sum_item_t *ps__sum_sched_pop(ps__sum_sched_t *s)
{
    ps__sum_item_t *item;
    if (!s->priority) {
        item = s->fifo_head;
        if (item) {
            s->fifo_head = item->next;
            if (!s->fifo_head)
                s->fifo_tail = NULL;
            s->size--;
            item->next = NULL;
        }
        return item;
    }
    if (s->heap_len == 0)
        return NULL;
    ps__sum_queue_t *q = s->heap[0];
    item = q->head;
    q->head = item->next;
    item->next = NULL;
    s->size--;
    if (!q->head) {
        q->tail = NULL;
        q->heap_index = -1;
        s->heap_len--;
        if (s->heap_len > 0) {
            heap_set(s, 0, s->heap[s->heap_len]);
            sift_down(s, 0);
        }
    } else {
        sift_down(s, 0); /* its head is younger now */
    }
    return item;
}

void ps__sum_sched_clear_count(ps__sum_sched_t *s, ps__sum_queue_t *q)
{
    if (!s->priority)
        return;
    q->count = 0;
    if (q->heap_index >= 0)
        sift_up(s, (size_t)q->heap_index); /* fewer counted pushes: it can only rise */
}
