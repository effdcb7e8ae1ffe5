/*
 * The staging pool of shm_stage.h.
 */
#include "ps/net/shm/shm_stage.h"

#include <pthread.h>
#include <stdlib.h>

#include "ps/net/shm/shm_seg.h"

/* Classes 32 KiB .. 64 MiB; bigger values get a segment of their own. */
#define MIN_SHIFT 15
#define MAX_SHIFT 26
#define NUM_CLASSES (MAX_SHIFT - MIN_SHIFT + 1)

typedef struct free_seg {
    struct free_seg *next;
    ps__shm_seg_t *seg;
} free_seg_t;

struct ps__shm_stage {
    pthread_mutex_t lock;
    uint32_t refs; /* atomic: the creator's and one per buffer out */
    size_t max_out, max_cached;
    size_t out, cached;
    free_seg_t *free[NUM_CLASSES];
};

typedef struct {
    ps__shm_stage_t *stage;
    int cls; /* -1: not pooled */
} staged_t;

static void stage_unref(ps__shm_stage_t *st)
{
    if (__atomic_sub_fetch(&st->refs, 1, __ATOMIC_ACQ_REL) != 0) {
        return;
    }
    for (int c = 0; c < NUM_CLASSES; ++c) {
        free_seg_t *f = st->free[c];
        while (f != NULL) {
            free_seg_t *next = f->next;
            ps__shm_seg_destroy(f->seg);
            free(f);
            f = next;
        }
    }
    pthread_mutex_destroy(&st->lock);
    free(st);
}

ps_status_t ps__shm_stage_create(size_t max_out, size_t max_cached, ps__shm_stage_t **stage_p)
{
    ps__shm_stage_t *st = calloc(1, sizeof(*st));
    if (st == NULL) {
        return PS_ERR_NO_MEMORY;
    }
    pthread_mutex_init(&st->lock, NULL);
    st->refs = 1;
    st->max_out = max_out;
    st->max_cached = max_cached;
    *stage_p = st;
    return PS_OK;
}

void ps__shm_stage_release(ps__shm_stage_t *stage)
{
    if (stage != NULL) {
        stage_unref(stage);
    }
}

static int class_of(size_t len)
{
    int c = 0;
    size_t size = (size_t)1 << MIN_SHIFT;
    while (size < len) {
        size <<= 1;
        c++;
    }
    return c < NUM_CLASSES ? c : -1;
}

static void staged_release(ps__shm_seg_t *seg, void *arg)
{
    staged_t *sd = arg;
    ps__shm_stage_t *st = sd->stage;
    int kept = 0;
    free_seg_t *f = sd->cls >= 0 ? malloc(sizeof(*f)) : NULL;
    pthread_mutex_lock(&st->lock);
    st->out -= seg->size;
    if (f != NULL && st->cached + seg->size <= st->max_cached) {
        f->seg = seg;
        f->next = st->free[sd->cls];
        st->free[sd->cls] = f;
        st->cached += seg->size;
        kept = 1;
    }
    pthread_mutex_unlock(&st->lock);
    if (!kept) {
        free(f);
        ps__shm_seg_destroy(seg);
    }
    free(sd);
    stage_unref(st);
}

ps_status_t ps__shm_stage_get(ps__shm_stage_t *stage, size_t len, ps_slice_t *slice_p)
{
    if (len == 0) {
        return PS_ERR_INVALID_ARG;
    }
    int cls = class_of(len);
    size_t size = cls >= 0 ? (size_t)1 << (MIN_SHIFT + cls) : len;
    staged_t *sd = malloc(sizeof(*sd));
    if (sd == NULL) {
        return PS_ERR_NO_MEMORY;
    }
    ps__shm_seg_t *seg = NULL;
    free_seg_t *f = NULL;
    pthread_mutex_lock(&stage->lock);
    if (cls >= 0 && stage->free[cls] != NULL) {
        f = stage->free[cls];
        stage->free[cls] = f->next;
        seg = f->seg;
        stage->cached -= seg->size;
    } else if (stage->out + size > stage->max_out) {
        pthread_mutex_unlock(&stage->lock);
        free(sd);
        return PS_ERR_AGAIN;
    }
    /* Counted before the segment exists, so that racing senders stay
     * within the bound; corrected below if the real size differs. */
    stage->out += seg != NULL ? seg->size : size;
    pthread_mutex_unlock(&stage->lock);
    free(f);
    if (seg == NULL) {
        ps_status_t st = ps__shm_seg_create(size, "stage", &seg);
        pthread_mutex_lock(&stage->lock);
        stage->out -= size;
        if (st == PS_OK) {
            stage->out += seg->size;
        }
        pthread_mutex_unlock(&stage->lock);
        if (st != PS_OK) {
            free(sd);
            return st;
        }
    }
    sd->stage = stage;
    sd->cls = cls;
    __atomic_add_fetch(&stage->refs, 1, __ATOMIC_RELAXED);
    ps_buf_t *buf;
    ps_status_t st = ps__shm_seg_wrap(seg, len, staged_release, sd, &buf);
    if (st != PS_OK) {
        staged_release(seg, sd);
        return st;
    }
    slice_p->buf = buf;
    slice_p->off = 0;
    slice_p->len = len;
    return PS_OK;
}

size_t ps__shm_stage_out_bytes(ps__shm_stage_t *stage)
{
    pthread_mutex_lock(&stage->lock);
    size_t n = stage->out;
    pthread_mutex_unlock(&stage->lock);
    return n;
}

size_t ps__shm_stage_cached_bytes(ps__shm_stage_t *stage)
{
    pthread_mutex_lock(&stage->lock);
    size_t n = stage->cached;
    pthread_mutex_unlock(&stage->lock);
    return n;
}
