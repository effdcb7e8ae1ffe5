/*
 * Device memory through a host-only van: one copy each way, pulls
 * pipelined (host_stage.h).
 */
#include "ps/app/host_stage.h"

#include <pthread.h>
#include <stdlib.h>

#include "ps/base/log.h"
#include "ps/gpu/mem.h"
#include "ps/gpu/stage_pool.h"

ps_status_t ps__app_sendable(const ps_slice_t *src, int device_ok, ps_slice_t *out_p)
{
    if (device_ok || src->len == 0 || ps_slice_in_host_mem(src)) {
        *out_p = ps_slice_ref(src);
        return PS_OK;
    }
    ps_slice_t host;
    ps_mem_kind_t kind = ps_slice_mem_ops_kind(src);
    ps_status_t st = ps_stage_pool_get(kind, src->len, &host);
    if (st != PS_OK) {
        return st;
    }
    st = ps_mem_ops(kind)->copy_to_host(ps_slice_ptr(&host), ps_slice_ptr(src), src->len);
    if (st != PS_OK) {
        ps_slice_unref(&host);
        return st;
    }
    *out_p = host;
    return PS_OK;
}

ps_status_t ps__app_receive_stage(const ps_slice_t *dest, ps_slice_t *out_p)
{
    return ps_stage_pool_get(ps_slice_mem_ops_kind(dest), dest->len, out_p);
}

ps_status_t ps__app_copy_in(const ps_slice_t *dest, size_t off, const void *src, size_t len)
{
    if (off > dest->len || len > dest->len - off) {
        return PS_ERR_INVALID_ARG;
    }
    if (len == 0 || ps_slice_in_host_mem(dest)) {
        return ps_slice_copy_in(dest, off, src, len);
    }
    return ps_mem_ops(ps_slice_mem_ops_kind(dest))->copy_from_host((char *)ps_slice_ptr(dest) + off, src, len);
}

/* ---- pipelined pulls ---- */

/* One stream per device of each kind, made on first use and kept for the
 * life of the process: every pipe's copies into that device queue there. */
#define PIPE_MAX_DEVICES 64

static pthread_mutex_t pipe_streams_lock = PTHREAD_MUTEX_INITIALIZER;
static void *pipe_streams[PS_MEM_KIND_COUNT][PIPE_MAX_DEVICES];

static ps_status_t pipe_stream(ps_mem_kind_t kind, int device, void **stream_p)
{
    if ((unsigned)kind >= PS_MEM_KIND_COUNT || device < 0 || device >= PIPE_MAX_DEVICES)
        return PS_ERR_UNSUPPORTED;
    ps_status_t st = PS_OK;
    pthread_mutex_lock(&pipe_streams_lock);
    if (pipe_streams[kind][device] == NULL)
        st = ps_mem_ops(kind)->stream_create(device, &pipe_streams[kind][device]);
    if (st == PS_OK)
        *stream_p = pipe_streams[kind][device];
    pthread_mutex_unlock(&pipe_streams_lock);
    return st;
}

/* A new event of `device` recorded on its default stream: done once the
 * work queued there so far is (the kernels that wrote a pushed value or
 * still read a pull's destination), which the pipes' copies go after, as
 * a synchronous copy in their place would. */
static ps_status_t default_stream_event(const ps_mem_ops_t *ops, int device,
                                        ps_mem_event_h *event_p)
{
    ps_mem_event_h ev;
    ps_status_t st = ops->event_create(device, &ev);
    if (st != PS_OK)
        return st;
    if ((st = ops->event_record(ev, NULL)) != PS_OK) {
        (void)ops->event_destroy(ev);
        return st;
    }
    *event_p = ev;
    return PS_OK;
}

struct ps__app_pipe {
    ps_slice_t dest;  /* the device destination (a reference) */
    ps_slice_t stage; /* the staging block the van receives into */
    const ps_mem_ops_t *ops;
    void *stream;
    ps_mem_event_h event;
    /* Recorded on dest's default stream when the pipe opened: the copies
     * go after the work queued there (a kernel still reading the old
     * values), as a synchronous copy in its place would. */
    ps_mem_event_h after;
    int after_done;
    int timeout_ms;
    /* The van's thread until finish, then the finisher's: */
    size_t copied;    /* bytes queued for dest */
    int finished;
    ps_status_t st;   /* the first failed copy's */
    ps__app_pipe_gone_func_t gone;
    void *gone_arg;
};

/* Whether the default stream's work is done: polled while the value
 * arrives (the receiving thread never waits for the device), waited for on
 * delivery. */
static int pipe_after(ps__app_pipe_t *pipe, int wait)
{
    if (pipe->after_done)
        return 1;
    ps_status_t st = wait ? ps_mem_event_wait(pipe->after, pipe->timeout_ms)
                          : ps_mem_event_query(pipe->after);
    if (st == PS_INPROGRESS)
        return 0;
    if (st != PS_OK) {
        ps_warn(PS_LOG_APP, "staged pull: waiting for the work queued before it on the %s "
                "device's default stream failed (%s)", pipe->ops->name, ps_status_str(st));
        pipe->st = st;
        return 0;
    }
    pipe->after_done = 1;
    return 1;
}

/* Queues bytes [copied, upto) of the block for dest, once the default
 * stream's earlier work is done (waiting for it when `wait`). */
static void pipe_queue(ps__app_pipe_t *pipe, size_t upto, int wait)
{
    if (pipe->st != PS_OK || upto <= pipe->copied || !pipe_after(pipe, wait))
        return;
    ps_status_t st = pipe->ops->copy_async((char *)ps_slice_ptr(&pipe->dest) + pipe->copied,
                                           (const char *)ps_slice_ptr(&pipe->stage) + pipe->copied,
                                           upto - pipe->copied, pipe->stream);
    if (st != PS_OK) {
        ps_warn(PS_LOG_APP, "staged pull: copying %zu bytes into %s memory failed (%s)",
                upto - pipe->copied, pipe->ops->name, ps_status_str(st));
        pipe->st = st;
        return;
    }
    pipe->copied = upto;
}

/* The van's progress report (ps_buf_fill_func_t): `end` is an offset into
 * the block's buffer. */
static void pipe_filled(void *arg, size_t end)
{
    ps__app_pipe_t *pipe = arg;
    if (pipe->finished || pipe->st != PS_OK || end <= pipe->stage.off)
        return;
    size_t in = end - pipe->stage.off;
    /* The whole value in: the delivery that follows copies the tail. */
    if (in >= pipe->stage.len)
        return;
    if (in - pipe->copied >= PS__APP_PIPE_CHUNK)
        pipe_queue(pipe, in - (in - pipe->copied) % PS__APP_PIPE_CHUNK, 0);
}

/* Waits for every copy queued so far. */
static ps_status_t pipe_drain(ps__app_pipe_t *pipe)
{
    if (pipe->copied == 0)
        return PS_OK;
    ps_status_t st = pipe->ops->event_record(pipe->event, pipe->stream);
    if (st == PS_OK)
        st = ps_mem_event_wait(pipe->event, pipe->timeout_ms);
    return st;
}

static void pipe_events_destroy(ps__app_pipe_t *pipe)
{
    if (pipe->event != NULL)
        (void)pipe->ops->event_destroy(pipe->event);
    if (pipe->after != NULL)
        (void)pipe->ops->event_destroy(pipe->after);
}

/* The van let go of the block: nothing more comes, so once the copies are
 * done the pipe goes. */
static void pipe_released(void *data, size_t len, void *arg)
{
    ps__app_pipe_t *pipe = arg;
    (void)data;
    (void)len;
    if (!pipe->finished) {
        ps_status_t st = pipe_drain(pipe);
        if (st != PS_OK)
            ps_error(PS_LOG_APP, "staged pull: copies into %s memory did not end (%s); its "
                     "destination may still be written", pipe->ops->name, ps_status_str(st));
    }
    pipe->gone(pipe->gone_arg);
    pipe_events_destroy(pipe);
    ps_slice_unref(&pipe->dest);
    ps_slice_unref(&pipe->stage);
    free(pipe);
}

ps_status_t ps__app_pipe_open(const ps_slice_t *dest, int timeout_ms, ps__app_pipe_gone_func_t gone,
                              void *gone_arg, ps_slice_t *recv_p, ps__app_pipe_t **pipe_p)
{
    if (dest->len < 2 * PS__APP_PIPE_CHUNK || ps_slice_in_host_mem(dest))
        return PS_ERR_UNSUPPORTED;
    ps_mem_kind_t kind = ps_slice_mem_ops_kind(dest);
    ps__app_pipe_t *pipe = calloc(1, sizeof(*pipe));
    if (pipe == NULL)
        return PS_ERR_NO_MEMORY;
    pipe->ops = ps_mem_ops(kind);
    pipe->timeout_ms = timeout_ms;
    pipe->gone = gone;
    pipe->gone_arg = gone_arg;
    int device = ps_slice_device(dest);
    ps_status_t st = pipe_stream(kind, device, &pipe->stream);
    if (st == PS_OK)
        st = pipe->ops->event_create(device, &pipe->event);
    if (st == PS_OK)
        st = default_stream_event(pipe->ops, device, &pipe->after);
    if (st != PS_OK) {
        pipe_events_destroy(pipe);
        free(pipe);
        return PS_ERR_UNSUPPORTED;
    }
    st = ps_stage_pool_get(kind, dest->len, &pipe->stage);
    ps_buf_t *proxy = NULL;
    if (st == PS_OK)
        st = ps_buf_proxy(pipe->stage.buf, pipe_released, pipe, &proxy);
    if (st != PS_OK) {
        ps_slice_unref(&pipe->stage);
        pipe_events_destroy(pipe);
        free(pipe);
        return st;
    }
    pipe->dest = ps_slice_ref(dest);
    ps_buf_set_fill_hook(proxy, pipe_filled, pipe);
    recv_p->buf = proxy; /* the proxy's first reference */
    recv_p->off = pipe->stage.off;
    recv_p->len = dest->len;
    *pipe_p = pipe;
    return PS_OK;
}

int ps__app_pipe_owns(const ps__app_pipe_t *pipe, const void *vals)
{
    return vals == ps_slice_ptr(&pipe->stage);
}

ps_status_t ps__app_pipe_finish(ps__app_pipe_t *pipe, size_t len, uint64_t *early_p)
{
    if (len > pipe->stage.len)
        return PS_ERR_INVALID_ARG;
    *early_p += pipe->copied;
    pipe_queue(pipe, len, 1);
    ps_status_t st = pipe_drain(pipe);
    /* Undrained, the van's letting go waits for the copies once more. */
    pipe->finished = st == PS_OK;
    return pipe->st != PS_OK ? pipe->st : st;
}

/* ---- pushes sent as they are copied out ---- */

/* Events per value: the chunk grows past PS__APP_PIPE_CHUNK for values
 * over this many of them. */
#define SEND_PIPE_MAX_CHUNKS 64

typedef struct {
    ps_slice_t stage; /* the staging block, written chunk by chunk */
    const ps_mem_ops_t *ops;
    size_t chunk;
    int n;            /* chunks queued, each followed by its event */
    int timeout_ms;
    pthread_mutex_t lock;
    int done;         /* chunks known to be in (lock) */
    ps_status_t st;   /* a failed copy's (lock) */
    ps_mem_event_h ev[SEND_PIPE_MAX_CHUNKS];
} send_pipe_t;

/* The van asks how far the block is written (ps_buf_written_func_t). */
static ps_status_t send_pipe_written(void *arg, int wait, size_t beyond, size_t *end_p)
{
    send_pipe_t *sp = arg;
    pthread_mutex_lock(&sp->lock);
    ps_status_t st = sp->st;
    for (;;) {
        while (st == PS_OK && sp->done < sp->n) {
            ps_status_t q = ps_mem_event_query(sp->ev[sp->done]);
            if (q == PS_INPROGRESS)
                break;
            if (q == PS_OK)
                sp->done++;
            else
                st = q;
        }
        size_t in = (size_t)sp->done * sp->chunk;
        size_t end = sp->stage.off + (in < sp->stage.len ? in : sp->stage.len);
        *end_p = end;
        if (st != PS_OK || !wait || sp->done == sp->n || end > beyond)
            break;
        ps_mem_event_h next = sp->ev[sp->done];
        pthread_mutex_unlock(&sp->lock);
        st = ps_mem_event_wait(next, sp->timeout_ms);
        pthread_mutex_lock(&sp->lock);
        if (st == PS_INPROGRESS)
            st = PS_OK;
    }
    if (st != PS_OK && sp->st == PS_OK) {
        ps_warn(PS_LOG_APP, "staged push: copying out of %s memory failed (%s)", sp->ops->name,
                ps_status_str(st));
        sp->st = st;
    }
    pthread_mutex_unlock(&sp->lock);
    return st;
}

/* Waits for the copies queued (the block goes back to its pool next) and
 * frees the pipe. */
static void send_pipe_free(send_pipe_t *sp)
{
    if (sp->n > 0) {
        ps_status_t st = ps_mem_event_wait(sp->ev[sp->n - 1], sp->timeout_ms);
        if (st != PS_OK)
            ps_error(PS_LOG_APP, "staged push: copies out of %s memory did not end (%s); its "
                     "staging block is leaked", sp->ops->name, ps_status_str(st));
        else
            ps_slice_unref(&sp->stage);
    } else {
        ps_slice_unref(&sp->stage);
    }
    for (int i = 0; i < SEND_PIPE_MAX_CHUNKS && sp->ev[i] != NULL; i++)
        (void)sp->ops->event_destroy(sp->ev[i]);
    pthread_mutex_destroy(&sp->lock);
    free(sp);
}

static void send_pipe_released(void *data, size_t len, void *arg)
{
    (void)data;
    (void)len;
    send_pipe_free(arg);
}

ps_status_t ps__app_sendable_as_written(const ps_slice_t *src, int timeout_ms, ps_slice_t *out_p)
{
    if (src->len < 2 * PS__APP_PIPE_CHUNK || ps_slice_in_host_mem(src))
        return PS_ERR_UNSUPPORTED;
    ps_mem_kind_t kind = ps_slice_mem_ops_kind(src);
    int device = ps_slice_device(src);
    void *stream;
    if (pipe_stream(kind, device, &stream) != PS_OK)
        return PS_ERR_UNSUPPORTED;
    send_pipe_t *sp = calloc(1, sizeof(*sp));
    if (sp == NULL)
        return PS_ERR_NO_MEMORY;
    sp->ops = ps_mem_ops(kind);
    sp->timeout_ms = timeout_ms;
    pthread_mutex_init(&sp->lock, NULL);
    size_t per = (src->len + SEND_PIPE_MAX_CHUNKS - 1) / SEND_PIPE_MAX_CHUNKS;
    sp->chunk = per > PS__APP_PIPE_CHUNK ? per : PS__APP_PIPE_CHUNK;
    int chunks = (int)((src->len + sp->chunk - 1) / sp->chunk);
    ps_status_t st = PS_OK;
    for (int i = 0; i < chunks && st == PS_OK; i++)
        st = sp->ops->event_create(device, &sp->ev[i]);
    ps_mem_event_h after = NULL;
    if (st == PS_OK)
        st = default_stream_event(sp->ops, device, &after);
    if (st != PS_OK) {
        send_pipe_free(sp);
        return PS_ERR_UNSUPPORTED;
    }
    st = ps_mem_event_wait(after, timeout_ms);
    (void)sp->ops->event_destroy(after);
    if (st == PS_OK)
        st = ps_stage_pool_get(kind, src->len, &sp->stage);
    for (int i = 0; i < chunks && st == PS_OK; i++) {
        size_t off = (size_t)i * sp->chunk;
        size_t len = src->len - off < sp->chunk ? src->len - off : sp->chunk;
        st = sp->ops->copy_async((char *)ps_slice_ptr(&sp->stage) + off,
                                 (const char *)ps_slice_ptr(src) + off, len, stream);
        if (st == PS_OK)
            st = sp->ops->event_record(sp->ev[i], stream);
        if (st == PS_OK)
            sp->n = i + 1;
    }
    ps_buf_t *proxy = NULL;
    if (st == PS_OK)
        st = ps_buf_proxy(sp->stage.buf, send_pipe_released, sp, &proxy);
    if (st != PS_OK) {
        send_pipe_free(sp);
        return st;
    }
    ps_buf_set_written_hook(proxy, send_pipe_written, sp);
    out_p->buf = proxy; /* the proxy's first reference */
    out_p->off = sp->stage.off;
    out_p->len = src->len;
    return PS_OK;
}
