/*
 * ps.af (the C part): the AF tensor app (ps/app/af.h) for Python.
 * _ps.AFWorker sends batches of Python buffers without a copy, each
 * answered through a _ps.AFHandle whose wait() blocks without the GIL;
 * _ps.AFServer polls for worker batches (_ps.AFBatch: the pushed tensors
 * as read-only memoryviews of where they landed, the pull slots' keys,
 * dtypes and shapes) and answers them with Python buffers, sent without a
 * copy too.
 *
 * A tensor's dtype and shape are its buffer's: the format (or the dtype a
 * torch tensor's conversion names, bfloat16 as 16-bit patterns) and the
 * buffer's dimensions.
 */
#include "ps/python/src/py_internal.h"

#include <stdlib.h>
#include <string.h>

#include "ps/app/af.h"

/* ---- dtypes and tensors ---- */

static const struct {
    ps_data_type_t type;
    int af;
} kAfTypes[] = {
    {PS_DATA_UINT8, PS_AF_UINT8},     {PS_DATA_INT8, PS_AF_INT8},
    {PS_DATA_INT16, PS_AF_INT16},     {PS_DATA_INT32, PS_AF_INT32},
    {PS_DATA_INT64, PS_AF_INT64},     {PS_DATA_FLOAT16, PS_AF_FLOAT16},
    {PS_DATA_FLOAT, PS_AF_FLOAT32},   {PS_DATA_DOUBLE, PS_AF_FLOAT64},
    {PS_DATA_BFLOAT16, PS_AF_BFLOAT16},
};
#define NUM_AF_TYPES (sizeof(kAfTypes) / sizeof(kAfTypes[0]))

/* The name ps.DTYPES uses for an AF dtype; NULL for one Python lacks. */
static const char *af_dtype_name(int af)
{
    for (size_t i = 0; i < NUM_AF_TYPES; i++)
        if (kAfTypes[i].af == af)
            return ps__py_dtype_name(kAfTypes[i].type);
    return NULL;
}

/* Views a Python object held for a batch or a server's lifetime, chained
 * through their `next` (they are never wrapped in slices). */
static void views_free(ps__py_view_t *v)
{
    while (v) {
        ps__py_view_t *next = v->next;
        ps__py_view_free(v);
        v = next;
    }
}

/* The view's bytes as tensor `key` with the buffer's dtype and shape; -1
 * with ValueError for an element type or a rank the AF app does not carry. */
static int tensor_of(const ps__py_view_t *v, uint64_t key, const char *what, ps_af_tensor_t *t)
{
    int af = -1;
    for (size_t i = 0; i < NUM_AF_TYPES; i++)
        if (kAfTypes[i].type == v->type)
            af = kAfTypes[i].af;
    if (af < 0) {
        PyErr_Format(PyExc_ValueError, "%s holds %s, which the AF app does not carry", what,
                     ps__py_dtype_name(v->type));
        return -1;
    }
    size_t elem = ps_af_dtype_size(af);
    int64_t shape[PS_AF_MAX_DIMS];
    uint32_t ndim;
    if ((size_t)v->view.itemsize == elem && v->view.shape) {
        if (v->view.ndim > PS_AF_MAX_DIMS) {
            PyErr_Format(PyExc_ValueError, "%s has %d dimensions, the AF app carries up to %d",
                         what, v->view.ndim, PS_AF_MAX_DIMS);
            return -1;
        }
        ndim = (uint32_t)v->view.ndim;
        for (uint32_t d = 0; d < ndim; d++)
            shape[d] = v->view.shape[d];
    } else {
        /* Raw bytes read as `af` elements: one dimension. */
        ndim = 1;
        shape[0] = (int64_t)((size_t)v->view.len / elem);
    }
    ps_af_tensor_init(t, key, v->view.buf, af, ndim, shape);
    t->mem_kind = v->mem_kind;
    t->device = v->device;
    return 0;
}

/* Parses one (key, tensor) or (key, tensor, dtype) item: the key into
 * *key_p, a view of the tensor (writable when asked; dtype reinterprets
 * the elements, e.g. uint16 bits as 'bfloat16'). */
static int pair_get(PyObject *item, int writable, const char *what, uint64_t *key_p,
                    ps__py_view_t **view_p)
{
    PyObject *key_obj, *obj, *dtype = Py_None;
    if (!PyTuple_Check(item) || !PyArg_ParseTuple(item, "OO|O", &key_obj, &obj, &dtype)) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s must be a sequence of (key, tensor[, dtype])", what);
        return -1;
    }
    unsigned long long k = PyLong_AsUnsignedLongLong(key_obj);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s: keys must be ints in 0 .. 2**64-1", what);
        return -1;
    }
    *key_p = k;
    return ps__py_view_get(obj, writable, dtype, what, view_p);
}

/* Waits, without the GIL, for the work queued on the streams of the device
 * tensors among `views` up to (not including) `end` (the AF app takes
 * device memory as it is, in default-stream order, unless a batch names
 * its stream). -1 with an exception. */
static int views_sync(const ps__py_view_t *views, const ps__py_view_t *end)
{
    ps_status_t st = PS_OK;
    int ms = ps__py_po ? ps_postoffice_request_timeout_ms(ps__py_po) : -1;
    Py_BEGIN_ALLOW_THREADS
    for (const ps__py_view_t *v = views; v != end && st == PS_OK; v = v->next)
        st = ps__py_view_sync(v, ms);
    Py_END_ALLOW_THREADS
    if (st != PS_OK) {
        ps__py_raise(st, "waiting for a tensor's stream");
        return -1;
    }
    return 0;
}

/* The readiness of tensors to send (a batch's pushes, an answer's
 * results): the one stream their producer wrote them on goes to ps, which
 * sends once its work is done, without holding up the caller; tensors on
 * several streams are waited for here. -1 with an exception. */
static int views_ready(const ps__py_view_t *views, ps_af_ready_t *ready_p)
{
    void *stream = NULL;
    int several = 0;
    for (const ps__py_view_t *v = views; v; v = v->next) {
        if (v->stream && stream && v->stream != stream)
            several = 1;
        if (v->stream)
            stream = v->stream;
    }
    if (several)
        return views_sync(views, NULL);
    ready_p->stream = stream;
    return 0;
}

/* Fills tensors[0..n) from a sequence of (key, tensor) pairs; the views go
 * on *views_p. -1 with an exception. */
static int tensors_get(PyObject *seq_obj, int writable, const char *what, ps_af_tensor_t **out_p,
                       size_t *n_p, ps__py_view_t **views_p)
{
    PyObject *seq = PySequence_Fast(seq_obj, "expected a sequence of (key, tensor) pairs");
    if (!seq)
        return -1;
    Py_ssize_t n = PySequence_Size(seq);
    ps_af_tensor_t *ts = calloc(n > 0 ? (size_t)n : 1, sizeof(*ts));
    if (!ts) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_GetItem(seq, i);
        if (!item)
            goto fail;
        uint64_t key;
        ps__py_view_t *v;
        int rc = pair_get(item, writable, what, &key, &v);
        Py_DECREF(item);
        if (rc < 0)
            goto fail;
        v->next = *views_p;
        *views_p = v;
        if (tensor_of(v, key, what, &ts[i]) < 0)
            goto fail;
    }
    Py_DECREF(seq);
    *out_p = ts;
    *n_p = (size_t)n;
    return 0;
fail:
    Py_DECREF(seq);
    free(ts);
    return -1;
}

static PyObject *shape_tuple(const ps_af_tensor_t *t)
{
    PyObject *shape = PyTuple_New((Py_ssize_t)t->ndim);
    for (uint32_t d = 0; shape && d < t->ndim; d++) {
        PyObject *dim = PyLong_FromLongLong(t->shape[d]);
        if (!dim || PyTuple_SetItem(shape, (Py_ssize_t)d, dim) < 0) {
            Py_CLEAR(shape);
            break;
        }
    }
    return shape;
}

/* ---- AFWorker and AFHandle ---- */

typedef struct {
    PyObject_HEAD
    ps_af_worker_t *worker;
    ps__py_view_t *orphans; /* views of batches whose handle went first */
    int waiters;
} worker_obj_t;

typedef struct {
    PyObject_HEAD
    PyObject *worker;
    ps_af_handle_t *handle;
    ps__py_view_t *views; /* the batch's tensors, held until it ended */
    int finished;
    ps_status_t status;
} handle_obj_t;

static PyTypeObject *g_worker_type;
static PyTypeObject *g_handle_type;

static void handle_dealloc(PyObject *self)
{
    handle_obj_t *h = (handle_obj_t *)self;
    worker_obj_t *w = (worker_obj_t *)h->worker;
    if (h->handle) {
        if (!h->finished && w->worker) {
            /* The batch goes on without its handle: its memory stays held
             * until the worker closes. */
            ps__py_view_t *last = h->views;
            while (last && last->next)
                last = last->next;
            if (last) {
                last->next = w->orphans;
                w->orphans = h->views;
                h->views = NULL;
            }
        }
        ps_af_handle_release(w->worker, h->handle);
    }
    views_free(h->views);
    Py_XDECREF(h->worker);
    ps__py_free_object(self);
}

static PyObject *handle_wait(PyObject *self, PyObject *args, PyObject *kw)
{
    handle_obj_t *h = (handle_obj_t *)self;
    int ms;
    if (ps__py_timeout_arg(args, kw, &ms) < 0)
        return NULL;
    if (!h->finished) {
        worker_obj_t *w = (worker_obj_t *)h->worker;
        if (!w->worker)
            return ps__py_raise(PS_ERR_SHUTDOWN, "the AF worker was closed");
        ps_af_worker_t *worker = w->worker;
        ps_af_handle_t *handle = h->handle;
        ps_status_t st;
        w->waiters++;
        Py_BEGIN_ALLOW_THREADS
        st = ps_af_worker_wait(worker, handle, ms);
        Py_END_ALLOW_THREADS
        w->waiters--;
        if (st == PS_ERR_TIMED_OUT)
            return ps__py_raise(st, "batch_push_pull");
        h->finished = 1;
        h->status = st;
        views_free(h->views);
        h->views = NULL;
    }
    if (h->status != PS_OK)
        return ps__py_raise(h->status, "batch_push_pull");
    Py_RETURN_NONE;
}

static PyObject *trace_dict(const ps_af_trace_t *t)
{
    return Py_BuildValue("{s:K,s:K,s:K,s:K}", "start", (unsigned long long)t->start, "postsend",
                         (unsigned long long)t->postsend, "postrecv",
                         (unsigned long long)t->postrecv, "process",
                         (unsigned long long)t->process);
}

static PyObject *handle_traces(PyObject *self, PyObject *unused)
{
    (void)unused;
    handle_obj_t *h = (handle_obj_t *)self;
    worker_obj_t *w = (worker_obj_t *)h->worker;
    if (!w->worker)
        return ps__py_raise(PS_ERR_SHUTDOWN, "the AF worker was closed");
    size_t n = ps_af_handle_num_slots(h->handle);
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; list && i < n; i++) {
        ps_af_trace_t req, resp;
        PyObject *item;
        if (ps_af_worker_fetch_trace(w->worker, h->handle, i, &req, &resp) == PS_OK) {
            PyObject *a = trace_dict(&req), *b = trace_dict(&resp);
            item = a && b ? PyTuple_Pack(2, a, b) : NULL;
            Py_XDECREF(a);
            Py_XDECREF(b);
        } else {
            item = Py_None;
            Py_INCREF(item);
        }
        if (!item || PyList_SetItem(list, (Py_ssize_t)i, item) < 0)
            Py_CLEAR(list);
    }
    return list;
}

static PyMethodDef kHandleMethods[] = {
    {"wait", (PyCFunction)(void (*)(void))handle_wait, METH_VARARGS | METH_KEYWORDS,
     "wait(timeout=None): blocks (without the GIL) until the batch ended; raises ps.Error on "
     "failure, ps.TimedOut when timeout seconds passed (the batch stays outstanding)."},
    {"traces", handle_traces, METH_NOARGS,
     "Per pull slot (server-major): (request, response) CLOCK_MONOTONIC ns stamps, or None "
     "(tracing off, STEPMESH_ENABLE_TRACE, or no answer yet)."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot kHandleSlots[] = {
    {Py_tp_dealloc, handle_dealloc},
    {Py_tp_methods, kHandleMethods},
    {Py_tp_doc, "An AF batch in flight; wait() for its end."},
    {0, NULL},
};

static PyType_Spec kHandleSpec = {
    "ps.AFHandle", sizeof(handle_obj_t), 0, Py_TPFLAGS_DEFAULT, kHandleSlots,
};

static int worker_init(PyObject *self, PyObject *args, PyObject *kw)
{
    worker_obj_t *w = (worker_obj_t *)self;
    int app_id, customer_id;
    if (ps__py_worker_args(args, kw, &app_id, &customer_id) < 0)
        return -1;
    if (w->worker) {
        ps__py_raise(PS_ERR_BAD_STATE, "AFWorker already initialised");
        return -1;
    }
    ps_status_t st = ps_af_worker_create(ps__py_po, app_id, customer_id, &w->worker);
    if (st != PS_OK) {
        ps__py_raise(st, "creating the AF worker");
        return -1;
    }
    return 0;
}

static void worker_destroy(worker_obj_t *w)
{
    ps_af_worker_t *worker = w->worker;
    w->worker = NULL;
    if (worker) {
        Py_BEGIN_ALLOW_THREADS
        ps_af_worker_destroy(worker);
        Py_END_ALLOW_THREADS
    }
    views_free(w->orphans);
    w->orphans = NULL;
}

static PyObject *worker_close(PyObject *self, PyObject *unused)
{
    (void)unused;
    worker_obj_t *w = (worker_obj_t *)self;
    if (w->waiters > 0)
        return ps__py_raise(PS_ERR_BAD_STATE, "closing an AF worker while a thread waits on it");
    worker_destroy(w);
    Py_RETURN_NONE;
}

static void worker_dealloc(PyObject *self)
{
    worker_destroy((worker_obj_t *)self);
    ps__py_free_object(self);
}

static PyObject *worker_batch_push_pull(PyObject *self, PyObject *args, PyObject *kw)
{
    worker_obj_t *w = (worker_obj_t *)self;
    static char *kwlist[] = {"push", "pull", NULL};
    PyObject *push_obj, *pull_obj;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO", kwlist, &push_obj, &pull_obj))
        return NULL;
    if (!w->worker)
        return ps__py_raise(PS_ERR_BAD_STATE, "the AF worker is closed");
    ps__py_view_t *views = NULL, *push_views = NULL;
    ps_af_tensor_t *push = NULL, *pull = NULL;
    size_t num_push = 0, num_pull = 0;
    ps_af_ready_t ready = {NULL, NULL};
    int push_ok = tensors_get(push_obj, 0, "push", &push, &num_push, &views) == 0;
    push_views = views; /* the pull views go before these on the chain */
    if (!push_ok || tensors_get(pull_obj, 1, "pull", &pull, &num_pull, &views) < 0 ||
        views_sync(views, push_views) < 0 || views_ready(push_views, &ready) < 0) {
        free(push);
        free(pull);
        views_free(views);
        return NULL;
    }
    handle_obj_t *h = PyObject_New(handle_obj_t, g_handle_type);
    if (!h) {
        free(push);
        free(pull);
        views_free(views);
        return NULL;
    }
    h->worker = self;
    Py_INCREF(self);
    h->handle = NULL;
    h->views = views;
    h->finished = 0;
    h->status = PS_INPROGRESS;
    ps_af_worker_t *worker = w->worker;
    ps_af_handle_t *handle = NULL;
    ps_status_t st;
    Py_BEGIN_ALLOW_THREADS
    st = ps_af_worker_batch_push_pull_when(worker, push, num_push, pull, num_pull, &ready,
                                           &handle);
    Py_END_ALLOW_THREADS
    free(push);
    free(pull);
    if (st != PS_OK) {
        Py_DECREF(h); /* frees the views: nothing was sent */
        return ps__py_raise(st, "batch_push_pull");
    }
    h->handle = handle;
    return (PyObject *)h;
}

static PyObject *worker_register_tensor(PyObject *self, PyObject *args)
{
    worker_obj_t *w = (worker_obj_t *)self;
    PyObject *obj;
    if (!PyArg_ParseTuple(args, "O", &obj))
        return NULL;
    if (!w->worker)
        return ps__py_raise(PS_ERR_BAD_STATE, "the AF worker is closed");
    ps__py_view_t *v;
    ps_af_tensor_t t;
    if (ps__py_view_get(obj, 0, NULL, "tensor", &v) < 0)
        return NULL;
    if (tensor_of(v, 0, "tensor", &t) < 0) {
        ps__py_view_free(v);
        return NULL;
    }
    ps_status_t st = ps_af_worker_register_tensor(w->worker, &t);
    if (st != PS_OK) {
        ps__py_view_free(v);
        return ps__py_raise(st, "register_tensor");
    }
    /* Registered memory must outlive the worker: held until it closes. */
    v->next = w->orphans;
    w->orphans = v;
    Py_RETURN_NONE;
}

static PyObject *worker_stats(PyObject *self, PyObject *unused)
{
    (void)unused;
    worker_obj_t *w = (worker_obj_t *)self;
    if (!w->worker)
        return ps__py_raise(PS_ERR_BAD_STATE, "the AF worker is closed");
    ps_af_worker_stats_t s;
    ps_af_worker_stats(w->worker, &s);
    return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K}", "batches", (unsigned long long)s.batches,
                         "pull_bytes_in_place", (unsigned long long)s.pull_bytes_in_place,
                         "pull_bytes_copied", (unsigned long long)s.pull_bytes_copied,
                         "pull_bytes_staged", (unsigned long long)s.pull_bytes_staged,
                         "pull_bytes_piped", (unsigned long long)s.pull_bytes_piped);
}

#define KW_METHOD(fn) (PyCFunction)(void (*)(void))(fn), METH_VARARGS | METH_KEYWORDS

static PyMethodDef kWorkerMethods[] = {
    {"batch_push_pull", KW_METHOD(worker_batch_push_pull),
     "batch_push_pull(push, pull) -> AFHandle: push and pull are sequences of (key, tensor); "
     "pull server-major."},
    {"register_tensor", worker_register_tensor, METH_VARARGS,
     "register_tensor(tensor): memory later batches' tensors lie in (held until close)."},
    {"close", worker_close, METH_NOARGS, "Fails outstanding batches, frees."},
    {"stats", worker_stats, METH_NOARGS, "The worker's counters."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot kWorkerSlots[] = {
    {Py_tp_init, worker_init},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, worker_dealloc},
    {Py_tp_methods, kWorkerMethods},
    {Py_tp_doc, "AFWorker(app_id=0, customer_id=0): an AF (attention) worker."},
    {0, NULL},
};

static PyType_Spec kWorkerSpec = {
    "ps.AFWorker", sizeof(worker_obj_t), 0, Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    kWorkerSlots,
};

/* ---- AFServer and AFBatch ---- */

typedef struct {
    PyObject_HEAD
    ps_af_server_t *server;
    ps__py_view_t *recv_views; /* registered receive tensors, held until close */
    int waiters;
} server_obj_t;

typedef struct {
    PyObject_HEAD
    PyObject *server;
    ps_af_batch_t *batch; /* NULL once every slot was answered */
    PyObject *push;       /* [(key, memoryview, dtype, shape)] */
    PyObject *pull;       /* [(key, dtype, shape)] */
    size_t answered;
} batch_obj_t;

static PyTypeObject *g_server_type;
static PyTypeObject *g_batch_type;

/* The push views end with the batch: released so Python cannot read the
 * transport's memory afterwards through them (arrays made from them still
 * can; the documentation says they end with respond). */
static void batch_end(batch_obj_t *b)
{
    b->batch = NULL;
    Py_ssize_t n = b->push ? PyList_Size(b->push) : 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GetItem(b->push, i);
        PyObject *mv = item ? PyTuple_GetItem(item, 1) : NULL;
        PyObject *r = mv ? PyObject_CallMethod(mv, "release", NULL) : NULL;
        if (!r)
            PyErr_Clear(); /* still exported: the arrays made from it stay */
        Py_XDECREF(r);
    }
}

static void batch_dealloc(PyObject *self)
{
    batch_obj_t *b = (batch_obj_t *)self;
    Py_XDECREF(b->push);
    Py_XDECREF(b->pull);
    Py_XDECREF(b->server);
    ps__py_free_object(self);
}

static PyObject *batch_get_push(PyObject *self, void *c)
{
    (void)c;
    batch_obj_t *b = (batch_obj_t *)self;
    if (!b->batch)
        return ps__py_raise(PS_ERR_BAD_STATE, "the batch was answered; its pushes are gone");
    Py_INCREF(b->push);
    return b->push;
}

static PyObject *batch_get_pull(PyObject *self, void *c)
{
    (void)c;
    Py_INCREF(((batch_obj_t *)self)->pull);
    return ((batch_obj_t *)self)->pull;
}

#define BATCH_INT(fn, field)                                                     \
    static PyObject *fn(PyObject *self, void *c)                                 \
    {                                                                            \
        (void)c;                                                                 \
        batch_obj_t *b = (batch_obj_t *)self;                                    \
        if (!b->batch)                                                           \
            return ps__py_raise(PS_ERR_BAD_STATE, "the batch was answered");     \
        return PyLong_FromUnsignedLongLong((unsigned long long)b->batch->field); \
    }

BATCH_INT(batch_get_sender, sender)
BATCH_INT(batch_get_worker_rank, worker_rank)
BATCH_INT(batch_get_seq, seq)

static PyObject *batch_get_answered(PyObject *self, void *c)
{
    (void)c;
    return PyBool_FromLong(((batch_obj_t *)self)->batch == NULL);
}

static PyGetSetDef kBatchGetSet[] = {
    {"push", batch_get_push, NULL,
     "[(key, memoryview, dtype, shape)]: the pushed tensors where they landed (read-only, "
     "valid until the batch is answered).", NULL},
    {"pull", batch_get_pull, NULL, "[(key, dtype, shape)]: this server's pull slots.", NULL},
    {"sender", batch_get_sender, NULL, "The worker's node id.", NULL},
    {"worker_rank", batch_get_worker_rank, NULL, "The worker's rank.", NULL},
    {"seq", batch_get_seq, NULL, "The worker's batch number, from 0.", NULL},
    {"answered", batch_get_answered, NULL, "True once every pull slot was answered.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot kBatchSlots[] = {
    {Py_tp_dealloc, batch_dealloc},
    {Py_tp_getset, kBatchGetSet},
    {Py_tp_doc, "One worker batch as an AF server sees it; answer it with AFServer.respond."},
    {0, NULL},
};

static PyType_Spec kBatchSpec = {
    "ps.AFBatch", sizeof(batch_obj_t), 0, Py_TPFLAGS_DEFAULT, kBatchSlots,
};

/* The AFBatch of one C batch; NULL with an exception. */
static PyObject *batch_new(PyObject *server, ps_af_batch_t *cb)
{
    batch_obj_t *b = PyObject_New(batch_obj_t, g_batch_type);
    if (!b)
        return NULL;
    b->server = server;
    Py_INCREF(server);
    b->batch = cb;
    b->answered = 0;
    b->push = PyList_New((Py_ssize_t)cb->num_push);
    b->pull = PyList_New((Py_ssize_t)cb->num_pull);
    if (!b->push || !b->pull)
        goto fail;
    for (size_t i = 0; i < cb->num_push; i++) {
        const ps_af_tensor_t *t = &cb->push[i];
        uint64_t bytes = 0;
        ps_af_tensor_bytes(t, &bytes);
        const char *name = af_dtype_name(t->dtype);
        PyObject *mv = PyMemoryView_FromMemory(t->data, (Py_ssize_t)bytes, PyBUF_READ);
        PyObject *shape = shape_tuple(t);
        PyObject *item = mv && shape ? Py_BuildValue("(KOsO)", (unsigned long long)t->key, mv,
                                                     name ? name : "uint8", shape)
                                     : NULL;
        Py_XDECREF(mv);
        Py_XDECREF(shape);
        if (!item || PyList_SetItem(b->push, (Py_ssize_t)i, item) < 0)
            goto fail;
    }
    for (size_t i = 0; i < cb->num_pull; i++) {
        const ps_af_tensor_t *t = &cb->pull[i];
        const char *name = af_dtype_name(t->dtype);
        PyObject *shape = shape_tuple(t);
        PyObject *item = shape ? Py_BuildValue("(KsO)", (unsigned long long)t->key,
                                               name ? name : "uint8", shape)
                               : NULL;
        Py_XDECREF(shape);
        if (!item || PyList_SetItem(b->pull, (Py_ssize_t)i, item) < 0)
            goto fail;
    }
    return (PyObject *)b;
fail:
    Py_DECREF(b);
    return NULL;
}

static int server_init(PyObject *self, PyObject *args, PyObject *kw)
{
    server_obj_t *s = (server_obj_t *)self;
    int app_id;
    if (ps__py_app_id_arg(args, kw, &app_id) < 0)
        return -1;
    if (s->server) {
        ps__py_raise(PS_ERR_BAD_STATE, "AFServer already initialised");
        return -1;
    }
    ps_status_t st = ps_af_server_create(ps__py_po, app_id, NULL, NULL, &s->server);
    if (st != PS_OK) {
        ps__py_raise(st, "creating the AF server");
        return -1;
    }
    return 0;
}

static void server_destroy(server_obj_t *s)
{
    ps_af_server_t *server = s->server;
    s->server = NULL;
    if (server) {
        Py_BEGIN_ALLOW_THREADS
        ps_af_server_destroy(server);
        Py_END_ALLOW_THREADS
    }
    views_free(s->recv_views);
    s->recv_views = NULL;
}

static PyObject *server_close(PyObject *self, PyObject *unused)
{
    (void)unused;
    server_obj_t *s = (server_obj_t *)self;
    if (s->waiters > 0)
        return ps__py_raise(PS_ERR_BAD_STATE, "closing an AF server while a thread waits on it");
    server_destroy(s);
    Py_RETURN_NONE;
}

static void server_dealloc(PyObject *self)
{
    server_destroy((server_obj_t *)self);
    ps__py_free_object(self);
}

static PyObject *server_get_batch(PyObject *self, PyObject *args, PyObject *kw)
{
    server_obj_t *s = (server_obj_t *)self;
    int ms;
    if (ps__py_timeout_arg(args, kw, &ms) < 0)
        return NULL;
    if (!s->server)
        return ps__py_raise(PS_ERR_BAD_STATE, "the AF server is closed");
    int workers = ps_postoffice_num_workers(ps__py_po);
    size_t cap = workers > 0 ? (size_t)workers : 1;
    ps_af_batch_t **batches = calloc(cap, sizeof(*batches));
    if (!batches)
        return PyErr_NoMemory();
    ps_af_server_t *server = s->server;
    size_t num = 0;
    ps_status_t st;
    s->waiters++;
    Py_BEGIN_ALLOW_THREADS
    st = ps_af_server_get_batch(server, batches, cap, &num, ms);
    Py_END_ALLOW_THREADS
    s->waiters--;
    PyObject *list = NULL;
    if (st != PS_OK) {
        ps__py_raise(st, "get_batch");
    } else {
        list = PyList_New((Py_ssize_t)num);
        for (size_t i = 0; list && i < num; i++) {
            PyObject *b = batch_new(self, batches[i]);
            if (!b || PyList_SetItem(list, (Py_ssize_t)i, b) < 0)
                Py_CLEAR(list);
        }
    }
    free(batches);
    return list;
}

/* Each result against the worker's slots of its key: the worker checks
 * only an answer's byte count and takes its bytes as its pull tensor's
 * dtype, so a result of another dtype or size than every such slot is
 * refused here, naming both (ValueError). A key with no slot is left to
 * ps_af_server_respond. -1 with the exception. */
static int results_fit(const ps_af_batch_t *batch, const ps_af_tensor_t *results, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const ps_af_tensor_t *r = &results[i], *other = NULL;
        uint64_t r_bytes = 0, other_bytes = 0;
        int fits = 0;
        (void)ps_af_tensor_bytes(r, &r_bytes);
        for (size_t j = 0; j < batch->num_pull && !fits; j++) {
            const ps_af_tensor_t *s = &batch->pull[j];
            uint64_t bytes = 0;
            if (s->key != r->key || ps_af_tensor_bytes(s, &bytes) != PS_OK)
                continue;
            fits = s->dtype == r->dtype && bytes == r_bytes;
            if (!other) {
                other = s;
                other_bytes = bytes;
            }
        }
        if (!fits && other) {
            const char *want = af_dtype_name(other->dtype);
            PyErr_Format(PyExc_ValueError,
                         "results: key %llu holds %llu bytes of %s, the worker's pull tensor "
                         "%llu bytes of %s", (unsigned long long)r->key,
                         (unsigned long long)r_bytes, af_dtype_name(r->dtype),
                         (unsigned long long)other_bytes, want ? want : "an unknown dtype");
            return -1;
        }
    }
    return 0;
}

/* Results hold their Python buffers through slices the transport keeps
 * (owners), so a result may be dropped right after respond. */
static PyObject *server_respond(PyObject *self, PyObject *args, PyObject *kw)
{
    server_obj_t *s = (server_obj_t *)self;
    static char *kwlist[] = {"batch", "results", NULL};
    PyObject *batch_obj, *results_obj;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!O", kwlist, g_batch_type, &batch_obj,
                                     &results_obj))
        return NULL;
    batch_obj_t *b = (batch_obj_t *)batch_obj;
    if (!s->server)
        return ps__py_raise(PS_ERR_BAD_STATE, "the AF server is closed");
    if (b->server != self)
        return ps__py_raise(PS_ERR_INVALID_ARG, "the batch came from another AF server");
    if (!b->batch)
        return ps__py_raise(PS_ERR_BAD_STATE, "the batch was answered already");
    ps__py_sweep();
    ps__py_view_t *views = NULL;
    ps_af_tensor_t *results = NULL;
    size_t n = 0;
    ps_af_ready_t ready = {NULL, NULL};
    if (tensors_get(results_obj, 0, "results", &results, &n, &views) < 0 ||
        results_fit(b->batch, results, n) < 0 || views_ready(views, &ready) < 0) {
        free(results);
        views_free(views);
        return NULL;
    }
    ps_slice_t *slices = calloc(n > 0 ? n : 1, sizeof(*slices));
    ps_buf_t **owners = calloc(n > 0 ? n : 1, sizeof(*owners));
    if (!slices || !owners) {
        free(slices);
        free(owners);
        free(results);
        views_free(views);
        return PyErr_NoMemory();
    }
    /* The views were chained newest first: results[n-1] is the head. */
    ps_status_t st = PS_OK;
    for (size_t i = n; i-- > 0;) {
        ps__py_view_t *v = views;
        views = v->next;
        v->next = NULL;
        if (st == PS_OK) {
            st = ps__py_view_slice(v, &slices[i]);
            if (st == PS_OK) {
                owners[i] = slices[i].buf;
            }
        } else {
            ps__py_view_free(v);
        }
    }
    /* Read before the respond: the one that answers the last slot frees
     * the batch. */
    const size_t num_pull = b->batch->num_pull;
    int answered = 0;
    if (st == PS_OK) {
        ps_af_server_t *server = s->server;
        ps_af_batch_t *cb = b->batch;
        Py_BEGIN_ALLOW_THREADS
        st = ps_af_server_respond_when(server, cb, results, owners, n, &ready);
        Py_END_ALLOW_THREADS
        /* Refused results leave the batch as it was; otherwise their slots
         * are answered, a send that failed included. */
        answered = st != PS_ERR_INVALID_ARG && st != PS_ERR_NO_MEMORY;
    }
    for (size_t i = 0; i < n; i++)
        if (owners[i])
            ps_slice_unref(&slices[i]);
    free(slices);
    free(owners);
    free(results);
    ps__py_sweep();
    if (answered) {
        b->answered += n;
        if (b->answered >= num_pull)
            batch_end(b);
    }
    if (st != PS_OK)
        return ps__py_raise(st, "respond");
    Py_RETURN_NONE;
}

static PyObject *server_register_recv_tensor(PyObject *self, PyObject *args, PyObject *kw)
{
    server_obj_t *s = (server_obj_t *)self;
    static char *kwlist[] = {"tensor", "worker_ranks", "keys", NULL};
    PyObject *obj, *ranks_obj, *keys_obj;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO", kwlist, &obj, &ranks_obj, &keys_obj))
        return NULL;
    if (!s->server)
        return ps__py_raise(PS_ERR_BAD_STATE, "the AF server is closed");
    PyObject *ranks = PySequence_Fast(ranks_obj, "worker_ranks must be a sequence of ints");
    if (!ranks)
        return NULL;
    PyObject *keys = PySequence_Fast(keys_obj, "keys must be a sequence of ints");
    if (!keys) {
        Py_DECREF(ranks);
        return NULL;
    }
    Py_ssize_t n = PySequence_Size(ranks);
    int *r = NULL;
    uint64_t *k = NULL;
    ps__py_view_t *v = NULL;
    PyObject *ret = NULL;
    if (PySequence_Size(keys) != n || n <= 0) {
        PyErr_SetString(PyExc_ValueError, "worker_ranks and keys must be as long, and not empty");
        goto out;
    }
    r = calloc((size_t)n, sizeof(*r));
    k = calloc((size_t)n, sizeof(*k));
    if (!r || !k) {
        PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *ri = PySequence_GetItem(ranks, i), *ki = PySequence_GetItem(keys, i);
        r[i] = ri ? (int)PyLong_AsLong(ri) : -1;
        k[i] = ki ? PyLong_AsUnsignedLongLong(ki) : 0;
        Py_XDECREF(ri);
        Py_XDECREF(ki);
        if (PyErr_Occurred()) {
            PyErr_Clear();
            PyErr_SetString(PyExc_ValueError, "worker_ranks and keys must be ints");
            goto out;
        }
    }
    ps_af_tensor_t t;
    if (ps__py_view_get(obj, 1, NULL, "tensor", &v) < 0)
        goto out;
    if (tensor_of(v, 0, "tensor", &t) < 0)
        goto out;
    ps_status_t st = ps_af_server_register_recv_tensor(s->server, &t, r, k, (size_t)n);
    if (st != PS_OK) {
        ps__py_raise(st, "register_recv_tensor");
        goto out;
    }
    /* The memory must outlive the server: held until it closes. */
    v->next = s->recv_views;
    s->recv_views = v;
    v = NULL;
    ret = Py_None;
    Py_INCREF(ret);
out:
    ps__py_view_free(v);
    free(r);
    free(k);
    Py_DECREF(ranks);
    Py_DECREF(keys);
    return ret;
}

static PyObject *server_stats(PyObject *self, PyObject *unused)
{
    (void)unused;
    server_obj_t *s = (server_obj_t *)self;
    if (!s->server)
        return ps__py_raise(PS_ERR_BAD_STATE, "the AF server is closed");
    ps_af_server_stats_t st;
    ps_af_server_stats(s->server, &st);
    return Py_BuildValue("{s:K,s:K,s:K,s:K}", "batches", (unsigned long long)st.batches,
                         "push_bytes_in_place", (unsigned long long)st.push_bytes_in_place,
                         "push_bytes", (unsigned long long)st.push_bytes, "dropped",
                         (unsigned long long)st.dropped);
}

static PyMethodDef kServerMethods[] = {
    {"get_batch", KW_METHOD(server_get_batch),
     "get_batch(timeout=None) -> [AFBatch]: one batch of every worker (by rank), waiting "
     "without the GIL; ps.TimedOut when timeout seconds passed."},
    {"respond", KW_METHOD(server_respond),
     "respond(batch, results): answers pull slots with (key, tensor) pairs, matched by key; "
     "ps.InvalidArgument for a key or size that matches no unanswered slot."},
    {"register_recv_tensor", KW_METHOD(server_register_recv_tensor),
     "register_recv_tensor(tensor, worker_ranks, keys): where worker_ranks[i]'s pushes of "
     "keys[i] land (the i-th of n equal parts; held until close)."},
    {"close", server_close, METH_NOARGS, "Drops batches not handed out, frees."},
    {"stats", server_stats, METH_NOARGS, "The server's counters."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot kServerSlots[] = {
    {Py_tp_init, server_init},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, server_dealloc},
    {Py_tp_methods, kServerMethods},
    {Py_tp_doc, "AFServer(app_id=0): an AF (FFN) server that polls for worker batches."},
    {0, NULL},
};

static PyType_Spec kServerSpec = {
    "ps.AFServer", sizeof(server_obj_t), 0, Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    kServerSlots,
};

int ps__py_af_add(PyObject *module)
{
    g_worker_type = ps__py_add_type(module, &kWorkerSpec, "AFWorker");
    g_handle_type = ps__py_add_type(module, &kHandleSpec, "AFHandle");
    g_server_type = ps__py_add_type(module, &kServerSpec, "AFServer");
    g_batch_type = ps__py_add_type(module, &kBatchSpec, "AFBatch");
    return g_worker_type && g_handle_type && g_server_type && g_batch_type ? 0 : -1;
}
