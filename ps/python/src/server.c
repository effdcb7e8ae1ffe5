/*
 * ps.KVServer (the C part) and the requests it hands to Python.
 *
 * The KV handler runs on the van's progress thread, which must never wait
 * for Python: it only queues the request (its meta and references to its
 * slices) under a mutex. A Python thread takes requests with next()
 * (blocking without the GIL) and runs the Python handler; the request
 * object answers with respond() / fail(). A request dropped unanswered is
 * failed, so no worker waits for it forever.
 */
#include "ps/python/src/py_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct item {
    ps_kv_meta_t meta;
    ps_slice_t keys, vals, lens;
    ps_data_type_t type;
    struct item *next;
} item_t;

/* Shared by the handler (ps thread) and the Python side. */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    item_t *head, *tail;
    int closing;
    uint64_t queued;
} queue_t;

typedef struct {
    PyObject_HEAD
    ps_kv_server_t *server;
    queue_t *queue; /* freed at dealloc: next() may still hold it */
    int closed;
    int app_id;
} server_obj_t;

typedef struct {
    PyObject_HEAD
    PyObject *server;
    item_t *item;
    int answered;
    Py_ssize_t shape_strides[2];
} request_obj_t;

static PyTypeObject *g_server_type;
static PyTypeObject *g_request_type;

static void item_free(item_t *it)
{
    ps_slice_unref(&it->keys);
    ps_slice_unref(&it->vals);
    ps_slice_unref(&it->lens);
    free(it);
}

static void on_request(void *arg, const ps_kv_meta_t *meta, const ps_kv_pairs_t *req,
                       ps_kv_server_t *server)
{
    queue_t *q = arg;
    item_t *it = calloc(1, sizeof(*it));
    if (!it) {
        /* Out of memory: answer at once rather than leave the worker waiting. */
        ps_kv_server_respond(server, meta, NULL);
        return;
    }
    it->meta = *meta;
    it->keys = ps_slice_ref(&req->keys);
    it->vals = ps_slice_ref(&req->vals);
    it->lens = ps_slice_ref(&req->lens);
    it->type = req->type;
    pthread_mutex_lock(&q->mu);
    if (q->closing) {
        pthread_mutex_unlock(&q->mu);
        item_free(it);
        return;
    }
    if (q->tail)
        q->tail->next = it;
    else
        q->head = it;
    q->tail = it;
    q->queued++;
    pthread_cond_signal(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

/* ---- answering ---- */

/* The "no value" answer: a pull gets every key with length 0 (the worker
 * completes it with PS_ERR_NOT_FOUND), a push its acknowledgement. */
static ps_status_t respond_failed(ps_kv_server_t *server, const item_t *it)
{
    if (!it->meta.pull)
        return ps_kv_server_respond(server, &it->meta, NULL);
    size_t n = ps_slice_len(&it->keys) / sizeof(ps_key_t);
    ps_kv_pairs_t res;
    memset(&res, 0, sizeof(res));
    res.keys = it->keys;
    res.type = it->type;
    ps_status_t st = ps_slice_alloc(n * sizeof(int32_t), 0, &res.lens);
    if (st != PS_OK)
        return st;
    memset(ps_slice_ptr(&res.lens), 0, n * sizeof(int32_t));
    st = ps_kv_server_respond(server, &it->meta, &res);
    ps_slice_unref(&res.lens);
    return st;
}

static server_obj_t *request_server(request_obj_t *r)
{
    server_obj_t *s = (server_obj_t *)r->server;
    if (!s->server) {
        ps__py_raise(PS_ERR_BAD_STATE, "the KVServer is closed");
        return NULL;
    }
    return s;
}

static PyObject *request_respond(PyObject *self, PyObject *args, PyObject *kw)
{
    request_obj_t *r = (request_obj_t *)self;
    static char *kwlist[] = {"vals", "lens", "dtype", NULL};
    PyObject *vals = Py_None, *lens = Py_None, *dtype = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|OOO", kwlist, &vals, &lens, &dtype))
        return NULL;
    if (r->answered)
        return ps__py_raise(PS_ERR_BAD_STATE, "this request was answered already");
    server_obj_t *s = request_server(r);
    if (!s)
        return NULL;
    ps__py_sweep();
    item_t *it = r->item;
    if (vals == Py_None) {
        if (it->meta.pull) {
            PyErr_SetString(PyExc_ValueError, "a pull request must be answered with vals");
            return NULL;
        }
        ps_status_t st;
        Py_BEGIN_ALLOW_THREADS
        st = ps_kv_server_respond(s->server, &it->meta, NULL);
        Py_END_ALLOW_THREADS
        r->answered = 1;
        if (st != PS_OK)
            return ps__py_raise(st, "respond");
        Py_RETURN_NONE;
    }
    if (!it->meta.pull) {
        PyErr_SetString(PyExc_ValueError, "a push request is answered without vals");
        return NULL;
    }
    ps__py_view_t *view;
    if (ps__py_view_get(vals, 0, dtype, "vals", &view) < 0)
        return NULL;
    /* The worker refuses an answer of another size or dtype than its
     * destination's, saying so in its own log only: such an answer (the
     * share's size is val_len, 0 for a pull the servers size) fails the
     * pull here with PS_ERR_PROTOCOL, which the worker raises as a
     * ValueError, and is named on this side. */
    if (view->type != it->type ||
        (it->meta.val_len > 0 && (uint64_t)view->view.len != it->meta.val_len)) {
        ps_data_type_t got = view->type;
        Py_ssize_t got_bytes = view->view.len;
        ps__py_view_free(view);
        ps_kv_server_t *server = s->server;
        Py_BEGIN_ALLOW_THREADS
        (void)ps_kv_server_respond_error(server, &it->meta, PS_ERR_PROTOCOL);
        Py_END_ALLOW_THREADS
        r->answered = 1;
        const char *want = ps__py_dtype_name(it->type);
        want = want ? want : "an unknown dtype";
        if (it->meta.val_len > 0)
            PyErr_Format(PyExc_ValueError, "respond: vals hold %zd bytes of %s, the worker pulls "
                         "%llu bytes of %s: its pull fails (dtype= names the element type of raw "
                         "bytes)", got_bytes, ps__py_dtype_name(got),
                         (unsigned long long)it->meta.val_len, want);
        else
            PyErr_Format(PyExc_ValueError, "respond: vals hold %zd bytes of %s, the worker pulls "
                         "%s: its pull fails (dtype= names the element type of raw bytes)",
                         got_bytes, ps__py_dtype_name(got), want);
        return NULL;
    }
    size_t num_keys = ps_slice_len(&it->keys) / sizeof(ps_key_t);
    size_t elem = ps__py_dtype_size(view->type);
    size_t bytes = (size_t)view->view.len;
    ps_kv_pairs_t res;
    memset(&res, 0, sizeof(res));
    res.keys = it->keys;
    res.type = view->type;
    if (lens != Py_None) {
        PyObject *seq = PySequence_Fast(lens, "lens must be a sequence of ints");
        if (!seq) {
            ps__py_view_free(view);
            return NULL;
        }
        Py_ssize_t n = PySequence_Size(seq);
        size_t total = 0;
        ps_status_t st = n == (Py_ssize_t)num_keys
                             ? ps_slice_alloc((size_t)n * sizeof(int32_t), 0, &res.lens)
                             : PS_ERR_INVALID_ARG;
        for (Py_ssize_t i = 0; st == PS_OK && i < n; i++) {
            PyObject *item = PySequence_GetItem(seq, i);
            long v = item ? PyLong_AsLong(item) : -1;
            Py_XDECREF(item);
            if (PyErr_Occurred() || v < 0 || v > INT32_MAX)
                st = PS_ERR_INVALID_ARG;
            else
                ((int32_t *)ps_slice_ptr(&res.lens))[i] = (int32_t)v;
            total += (size_t)v;
        }
        Py_DECREF(seq);
        if (st != PS_OK || total * elem != bytes) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "lens must give one length per key (%zu) adding up "
                         "to the %zu elements of vals", num_keys, bytes / elem);
            ps_slice_unref(&res.lens);
            ps__py_view_free(view);
            return NULL;
        }
    } else if (num_keys == 0 || bytes % (num_keys * elem) != 0) {
        PyErr_Format(PyExc_ValueError, "vals (%zu bytes) do not split evenly over %zu key(s); "
                     "pass lens=", bytes, num_keys);
        ps__py_view_free(view);
        return NULL;
    }
    /* Device values go once the stream their producer names (its
     * __cuda_array_interface__) is done with them. */
    ps_kv_ready_t ready = {NULL, view->stream};
    ps_status_t st = ps__py_view_slice(view, &res.vals);
    if (st == PS_OK) {
        Py_BEGIN_ALLOW_THREADS
        st = ps_kv_server_respond_when(s->server, &it->meta, &res, &ready);
        Py_END_ALLOW_THREADS
        ps_slice_unref(&res.vals);
    }
    ps_slice_unref(&res.lens);
    r->answered = 1;
    ps__py_sweep();
    if (st != PS_OK)
        return ps__py_raise(st, "respond");
    Py_RETURN_NONE;
}

static PyObject *request_fail(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"error", NULL};
    PyObject *error = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O", kwlist, &error))
        return NULL;
    request_obj_t *r = (request_obj_t *)self;
    if (r->answered)
        return ps__py_raise(PS_ERR_BAD_STATE, "this request was answered already");
    ps_status_t status = PS_OK;
    if (error != Py_None && ps__py_status_of(error, &status) < 0)
        return NULL;
    server_obj_t *s = request_server(r);
    if (!s)
        return NULL;
    ps_status_t st;
    Py_BEGIN_ALLOW_THREADS
    st = status == PS_OK ? respond_failed(s->server, r->item)
                         : ps_kv_server_respond_error(s->server, &r->item->meta, status);
    Py_END_ALLOW_THREADS
    if (st == PS_ERR_INVALID_ARG && status != PS_OK)
        return ps__py_raise(st, "fail: the error is no error status");
    r->answered = 1;
    if (st != PS_OK)
        return ps__py_raise(st, "respond");
    Py_RETURN_NONE;
}

static void request_dealloc(PyObject *self)
{
    request_obj_t *r = (request_obj_t *)self;
    server_obj_t *s = (server_obj_t *)r->server;
    if (!r->answered && s && s->server) {
        ps_kv_server_t *server = s->server;
        Py_BEGIN_ALLOW_THREADS
        respond_failed(server, r->item);
        Py_END_ALLOW_THREADS
    }
    if (r->item)
        item_free(r->item);
    Py_XDECREF(r->server);
    ps__py_free_object(self);
}

/* The request's values, read-only, typed, one dimension. */
static int request_getbuffer(PyObject *self, Py_buffer *view, int flags)
{
    request_obj_t *r = (request_obj_t *)self;
    return ps__py_slice_getbuffer(self, &r->item->vals, r->item->type, 1, r->shape_strides, view,
                                  flags);
}

static PyObject *slice_ints(const ps_slice_t *s, int is_keys)
{
    size_t elem = is_keys ? sizeof(ps_key_t) : sizeof(int32_t);
    size_t n = ps_slice_len(s) / elem;
    PyObject *t = PyTuple_New((Py_ssize_t)n);
    if (!t)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        PyObject *v = is_keys ? PyLong_FromUnsignedLongLong(((ps_key_t *)ps_slice_ptr(s))[i])
                              : PyLong_FromLong(((int32_t *)ps_slice_ptr(s))[i]);
        if (!v || PyTuple_SetItem(t, (Py_ssize_t)i, v) < 0) {
            Py_DECREF(t);
            return NULL;
        }
    }
    return t;
}

#define META_INT(fn, field)                                      \
    static PyObject *fn(PyObject *self, void *closure)           \
    {                                                            \
        (void)closure;                                           \
        return PyLong_FromLongLong(                              \
            (long long)((request_obj_t *)self)->item->meta.field); \
    }
META_INT(req_cmd, cmd)
META_INT(req_sender, sender)
META_INT(req_timestamp, timestamp)
META_INT(req_val_len, val_len)
META_INT(req_customer_id, customer_id)

static PyObject *req_is_push(PyObject *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(((request_obj_t *)self)->item->meta.push);
}

static PyObject *req_is_pull(PyObject *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(((request_obj_t *)self)->item->meta.pull);
}

static PyObject *req_keys(PyObject *self, void *closure)
{
    (void)closure;
    return slice_ints(&((request_obj_t *)self)->item->keys, 1);
}

static PyObject *req_lens(PyObject *self, void *closure)
{
    (void)closure;
    request_obj_t *r = (request_obj_t *)self;
    if (ps_slice_is_empty(&r->item->lens))
        Py_RETURN_NONE;
    return slice_ints(&r->item->lens, 0);
}

static PyObject *req_dtype(PyObject *self, void *closure)
{
    (void)closure;
    const char *name = ps__py_dtype_name(((request_obj_t *)self)->item->type);
    return PyUnicode_FromString(name ? name : "other");
}

static PyObject *req_vals(PyObject *self, void *closure)
{
    (void)closure;
    const ps_slice_t *vals = &((request_obj_t *)self)->item->vals;
    if (ps_slice_len(vals) != 0 && !ps_slice_in_host_mem(vals))
        return ps__py_device_view(self, vals, ((request_obj_t *)self)->item->type);
    return PyMemoryView_FromObject(self);
}

static PyObject *req_answered(PyObject *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(((request_obj_t *)self)->answered);
}

static PyGetSetDef kRequestGetSet[] = {
    {"cmd", req_cmd, NULL, "The worker's cmd.", NULL},
    {"sender", req_sender, NULL, "The worker's node id.", NULL},
    {"timestamp", req_timestamp, NULL, "The request's timestamp.", NULL},
    {"val_len", req_val_len, NULL, "Bytes the worker expects back (pull).", NULL},
    {"customer_id", req_customer_id, NULL, "The worker's customer id.", NULL},
    {"push", req_is_push, NULL, "True for a push (or push-pull).", NULL},
    {"pull", req_is_pull, NULL, "True for a pull (or push-pull).", NULL},
    {"keys", req_keys, NULL, "The keys, a tuple of ints.", NULL},
    {"lens", req_lens, NULL, "Per-key lengths in elements, or None (uniform).", NULL},
    {"dtype", req_dtype, NULL, "The values' element type.", NULL},
    {"vals", req_vals, NULL,
     "The pushed values, no copy: a read-only typed memoryview, or a read-only "
     "ps.DeviceArray when they are in device memory (a registered device buffer).",
     NULL},
    {"answered", req_answered, NULL, "True once respond() or fail() ran.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef kRequestMethods[] = {
    {"respond", (PyCFunction)(void (*)(void))request_respond, METH_VARARGS | METH_KEYWORDS,
     "respond(vals=None, lens=None, dtype=None): answers (a pull with vals, sent without a "
     "copy: leave them unchanged afterwards)."},
    {"fail", (PyCFunction)(void (*)(void))request_fail, METH_VARARGS | METH_KEYWORDS,
     "fail(error=None): without error, answers 'no value' (the worker's pull raises "
     "ps.NotFound; a push is acknowledged); with one (a ps error class such as "
     "ps.InvalidArgument, an instance of one, or a status number), the worker's wait raises "
     "that error."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot kRequestSlots[] = {
    {Py_tp_dealloc, request_dealloc},
    {Py_tp_getset, kRequestGetSet},
    {Py_tp_methods, kRequestMethods},
    {Py_bf_getbuffer, request_getbuffer},
    {Py_tp_doc, "A KV request received by a KVServer."},
    {0, NULL},
};

static PyType_Spec kRequestSpec = {
    "ps.Request", sizeof(request_obj_t), 0, Py_TPFLAGS_DEFAULT, kRequestSlots,
};

/* ---- KVServer ---- */

static int server_init(PyObject *self, PyObject *args, PyObject *kw)
{
    server_obj_t *s = (server_obj_t *)self;
    int app_id;
    if (ps__py_app_id_arg(args, kw, &app_id) < 0)
        return -1;
    if (s->queue) {
        ps__py_raise(PS_ERR_BAD_STATE, "KVServer already initialised");
        return -1;
    }
    queue_t *q = calloc(1, sizeof(*q));
    if (!q) {
        PyErr_NoMemory();
        return -1;
    }
    pthread_mutex_init(&q->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&q->cv, &ca);
    pthread_condattr_destroy(&ca);
    ps_status_t st = ps_kv_server_create(ps__py_po, app_id, on_request, q, &s->server);
    if (st != PS_OK) {
        pthread_cond_destroy(&q->cv);
        pthread_mutex_destroy(&q->mu);
        free(q);
        ps__py_raise(st, "creating the KV server");
        return -1;
    }
    s->queue = q;
    s->app_id = app_id;
    return 0;
}

static void server_stop(server_obj_t *s)
{
    queue_t *q = s->queue;
    if (!q || s->closed)
        return;
    s->closed = 1;
    ps_kv_server_t *server = s->server;
    pthread_mutex_lock(&q->mu);
    q->closing = 1;
    item_t *pending = q->head;
    q->head = q->tail = NULL;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
    Py_BEGIN_ALLOW_THREADS
    /* Nobody will handle what is still queued: answer it "no value". */
    while (pending) {
        item_t *next = pending->next;
        respond_failed(server, pending);
        item_free(pending);
        pending = next;
    }
    ps_kv_server_destroy(server);
    Py_END_ALLOW_THREADS
    s->server = NULL;
    ps__py_sweep();
}

static PyObject *server_next(PyObject *self, PyObject *args, PyObject *kw)
{
    server_obj_t *s = (server_obj_t *)self;
    int ms;
    if (ps__py_timeout_arg(args, kw, &ms) < 0)
        return NULL;
    ps__py_sweep();
    queue_t *q = s->queue;
    if (!q || s->closed)
        Py_RETURN_NONE;
    item_t *it = NULL;
    Py_BEGIN_ALLOW_THREADS
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    long long wait_ms = ms < 0 ? 1000 : ms;
    until.tv_sec += wait_ms / 1000;
    until.tv_nsec += (wait_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&q->mu);
    while (!q->head && !q->closing) {
        if (pthread_cond_timedwait(&q->cv, &q->mu, &until) == ETIMEDOUT)
            break;
    }
    it = q->head;
    if (it) {
        q->head = it->next;
        if (!q->head)
            q->tail = NULL;
        it->next = NULL;
    }
    pthread_mutex_unlock(&q->mu);
    Py_END_ALLOW_THREADS
    if (!it)
        Py_RETURN_NONE;
    request_obj_t *r = PyObject_New(request_obj_t, g_request_type);
    if (!r) {
        /* Out of memory: answer "no value" so the worker does not wait. */
        ps_kv_server_t *server = s->server;
        Py_BEGIN_ALLOW_THREADS
        if (server)
            respond_failed(server, it);
        item_free(it);
        Py_END_ALLOW_THREADS
        return NULL;
    }
    r->server = self;
    Py_INCREF(self);
    r->item = it;
    r->answered = 0;
    return (PyObject *)r;
}

static PyObject *server_close(PyObject *self, PyObject *unused)
{
    (void)unused;
    server_stop((server_obj_t *)self);
    Py_RETURN_NONE;
}

static PyObject *server_closed(PyObject *self, void *closure)
{
    (void)closure;
    server_obj_t *s = (server_obj_t *)self;
    return PyBool_FromLong(s->queue == NULL || s->closed);
}

static void server_dealloc(PyObject *self)
{
    server_obj_t *s = (server_obj_t *)self;
    server_stop(s);
    if (s->queue) {
        pthread_cond_destroy(&s->queue->cv);
        pthread_mutex_destroy(&s->queue->mu);
        free(s->queue);
    }
    ps__py_free_object(self);
}

static PyObject *server_register_recv_buffer(PyObject *self, PyObject *args)
{
    server_obj_t *s = (server_obj_t *)self;
    int rank;
    unsigned long long key;
    PyObject *buf;
    if (!PyArg_ParseTuple(args, "iKO", &rank, &key, &buf))
        return NULL;
    if (s->closed || !s->server)
        return ps__py_raise(PS_ERR_BAD_STATE, "the KVServer is closed");
    ps__py_view_t *v;
    if (ps__py_view_get(buf, 1, NULL, "buffer", &v) < 0)
        return NULL;
    ps_slice_t slice;
    ps_status_t st = ps__py_view_slice(v, &slice);
    if (st == PS_OK) {
        st = ps_kv_server_register_recv_buffer(s->server, rank, (ps_key_t)key, &slice);
        ps_slice_unref(&slice);
    }
    ps__py_sweep();
    if (st != PS_OK)
        return ps__py_raise(st, "register_recv_buffer");
    Py_RETURN_NONE;
}

static PyMethodDef kServerMethods[] = {
    {"register_recv_buffer", server_register_recv_buffer, METH_VARARGS,
     "register_recv_buffer(worker_rank, key, buffer): pushes from that worker whose first "
     "key is `key` land in `buffer` (writable, kept until the server is freed)."},
    {"next", (PyCFunction)(void (*)(void))server_next, METH_VARARGS | METH_KEYWORDS,
     "next(timeout=None) -> Request or None: the next request (blocks without the GIL; "
     "None after timeout seconds, 1 s by default, or once closed)."},
    {"close", server_close, METH_NOARGS,
     "Stops serving: queued requests are answered 'no value'."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef kServerGetSet[] = {
    {"closed", server_closed, NULL, "True once closed.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot kServerSlots[] = {
    {Py_tp_init, server_init},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, server_dealloc},
    {Py_tp_methods, kServerMethods},
    {Py_tp_getset, kServerGetSet},
    {Py_tp_doc, "The C part of ps.KVServer: a request queue filled on the van's thread."},
    {0, NULL},
};

static PyType_Spec kServerSpec = {
    "ps._KVServer", sizeof(server_obj_t), 0, Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    kServerSlots,
};

int ps__py_server_add(PyObject *module)
{
    g_server_type = ps__py_add_type(module, &kServerSpec, "KVServer");
    g_request_type = ps__py_add_type(module, &kRequestSpec, "Request");
    return g_server_type && g_request_type ? 0 : -1;
}
