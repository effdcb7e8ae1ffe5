/*
 * ps.KVWorker (the C part): push, pull and push-pull of Python buffers
 * without a copy, each returning a _ps.Handle whose wait() blocks without
 * the GIL.
 *
 * A request's completion callback runs on a ps thread: it only stores the
 * status in a small record shared (reference-counted) with the handle, so
 * a handle may be dropped before its request ended.
 */
#include "ps/python/src/py_internal.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "ps/base/time.h"

typedef struct {
    PyObject_HEAD
    ps_kv_worker_t *worker;
    int app_id;
    int customer_id;
    int waiters; /* threads in wait() (GIL-protected) */
    PyObject *slicer; /* set_slicer's function, or NULL */
} worker_obj_t;

/* What a request's callback and its handle share. */
typedef struct {
    atomic_int refs;
    atomic_int fired;
    ps_status_t status;
} done_t;

typedef struct {
    PyObject_HEAD
    PyObject *worker; /* keeps the worker open while the handle lives */
    PyObject *result; /* what wait() returns (the destination), or None */
    done_t *done;
    int ts;
    int finished; /* wait() saw the end */
    ps_status_t status;
    const char *what;
    int any;             /* a pull the servers size: wait() takes its result */
    ps_data_type_t type; /* its element type, or the destination's */
    Py_ssize_t out_bytes; /* the destination's size (pull, push_pull) */
} handle_obj_t;

/* The values of a server-sized pull: a slice held for the buffers made of
 * it (writable: they are the caller's). */
typedef struct {
    PyObject_HEAD
    ps_slice_t slice;
    ps_data_type_t type;
    Py_ssize_t shape_strides[2];
} result_obj_t;

static PyTypeObject *g_worker_type;
static PyTypeObject *g_handle_type;
static PyTypeObject *g_result_type;

static int result_getbuffer(PyObject *self, Py_buffer *view, int flags)
{
    result_obj_t *r = (result_obj_t *)self;
    return ps__py_slice_getbuffer(self, &r->slice, r->type, 0, r->shape_strides, view, flags);
}

static void result_dealloc(PyObject *self)
{
    ps_slice_unref(&((result_obj_t *)self)->slice);
    ps__py_free_object(self);
}

static PyType_Slot kResultSlots[] = {
    {Py_tp_dealloc, result_dealloc},
    {Py_bf_getbuffer, result_getbuffer},
    {Py_tp_doc, "The values of a server-sized pull (buffer protocol, no copy)."},
    {0, NULL},
};

static PyType_Spec kResultSpec = {
    "ps._PullResult", sizeof(result_obj_t), 0, Py_TPFLAGS_DEFAULT, kResultSlots,
};

/* (memoryview of the values, [lengths]) of server-sized pull ts, taken from
 * the worker; NULL with an exception. */
static PyObject *take_any_result(ps_kv_worker_t *worker, int ts, ps_data_type_t type)
{
    ps_slice_t vals, lens;
    ps_status_t st = ps_kv_pull_result(worker, ts, &vals, &lens);
    if (st != PS_OK)
        return ps__py_raise(st, "taking the pull's result");
    size_t nk = lens.len / sizeof(int32_t);
    PyObject *list = PyList_New((Py_ssize_t)nk);
    for (size_t i = 0; list && i < nk; i++) {
        int32_t n;
        memcpy(&n, (const char *)ps_slice_ptr(&lens) + i * sizeof(n), sizeof(n));
        PyObject *item = PyLong_FromLong(n);
        if (!item || PyList_SetItem(list, (Py_ssize_t)i, item) < 0)
            Py_CLEAR(list);
    }
    ps_slice_unref(&lens);
    result_obj_t *r = list ? PyObject_New(result_obj_t, g_result_type) : NULL;
    if (!r) {
        ps_slice_unref(&vals);
        Py_XDECREF(list);
        return NULL;
    }
    r->slice = vals;
    r->type = type;
    PyObject *mv = PyMemoryView_FromObject((PyObject *)r);
    Py_DECREF(r);
    if (!mv) {
        Py_DECREF(list);
        return NULL;
    }
    return Py_BuildValue("(NN)", mv, list);
}

static void done_unref(done_t *d)
{
    if (atomic_fetch_sub_explicit(&d->refs, 1, memory_order_acq_rel) == 1)
        free(d);
}

static void on_done(void *arg, int ts, ps_status_t status)
{
    (void)ts;
    done_t *d = arg;
    d->status = status;
    atomic_store_explicit(&d->fired, 1, memory_order_release);
    done_unref(d);
}

ps_kv_worker_t *ps__py_worker_get(PyObject *obj)
{
    if (!PyObject_TypeCheck(obj, g_worker_type)) {
        PyErr_SetString(PyExc_TypeError, "expected a ps.KVWorker");
        return NULL;
    }
    worker_obj_t *w = (worker_obj_t *)obj;
    if (!w->worker) {
        ps__py_raise(PS_ERR_BAD_STATE, "the KVWorker is closed");
        return NULL;
    }
    return w->worker;
}

/* ---- Handle ---- */

static void handle_dealloc(PyObject *self)
{
    handle_obj_t *h = (handle_obj_t *)self;
    if (h->done)
        done_unref(h->done);
    Py_XDECREF(h->worker);
    Py_XDECREF(h->result);
    ps__py_free_object(self);
}

static PyObject *handle_wait(PyObject *self, PyObject *args, PyObject *kw)
{
    handle_obj_t *h = (handle_obj_t *)self;
    int ms;
    if (ps__py_timeout_arg(args, kw, &ms) < 0)
        return NULL;
    ps__py_sweep();
    if (!h->finished) {
        ps_status_t st = PS_OK;
        if (!atomic_load_explicit(&h->done->fired, memory_order_acquire)) {
            worker_obj_t *w = (worker_obj_t *)h->worker;
            if (!w->worker)
                return ps__py_raise(PS_ERR_SHUTDOWN, "the KVWorker was closed");
            ps_kv_worker_t *worker = w->worker;
            w->waiters++;
            Py_BEGIN_ALLOW_THREADS
            st = ps_kv_wait(worker, h->ts, ms);
            Py_END_ALLOW_THREADS
            w->waiters--;
            if (st == PS_ERR_TIMED_OUT && !atomic_load_explicit(&h->done->fired,
                                                                memory_order_acquire))
                return ps__py_raise(st, h->what);
        }
        if (atomic_load_explicit(&h->done->fired, memory_order_acquire))
            st = h->done->status;
        if (st == PS_OK && h->any) {
            PyObject *res = take_any_result(((worker_obj_t *)h->worker)->worker, h->ts, h->type);
            if (!res)
                return NULL;
            Py_DECREF(h->result);
            h->result = res;
        }
        h->finished = 1;
        h->status = st;
        ps__py_sweep();
    }
    /* The worker checks each server's answer against the destination (its
     * byte count, or the dtype's lengths, and its stated dtype) before it
     * writes, and says why in ps's log only; a ps.KVServer fails a pull
     * whose dtype or size its values do not match with this status. Either
     * way the values do not fit what the caller gave. */
    if (h->status == PS_ERR_PROTOCOL && h->any) {
        PyErr_Format(PyExc_ValueError, "pull_any: the servers' values are not %s, or their "
                     "lengths do not add up (ps's log, a ps.KVServer's stderr say which)",
                     ps__py_dtype_name(h->type));
        return NULL;
    }
    if (h->status == PS_ERR_PROTOCOL && h->result != Py_None) {
        PyErr_Format(PyExc_ValueError,
                     "%s: the servers' values do not fit out (%s, %zd bytes): they have another "
                     "byte count or dtype (ps's log names each server's byte count, a "
                     "ps.KVServer's stderr its values' dtype and size)",
                     h->what, ps__py_dtype_name(h->type), h->out_bytes);
        return NULL;
    }
    if (h->status != PS_OK)
        return ps__py_raise(h->status, h->what);
    Py_INCREF(h->result);
    return h->result;
}

static PyObject *handle_done(PyObject *self, PyObject *unused)
{
    (void)unused;
    handle_obj_t *h = (handle_obj_t *)self;
    return PyBool_FromLong(h->finished ||
                           atomic_load_explicit(&h->done->fired, memory_order_acquire));
}

static PyObject *handle_ts(PyObject *self, void *closure)
{
    (void)closure;
    return PyLong_FromLong(((handle_obj_t *)self)->ts);
}

static PyMethodDef kHandleMethods[] = {
    {"wait", (PyCFunction)(void (*)(void))handle_wait, METH_VARARGS | METH_KEYWORDS,
     "wait(timeout=None): blocks (without the GIL) until the request ended; returns the "
     "destination (pull, push_pull) or None, raises ps.Error on failure, ps.TimedOut when "
     "timeout seconds passed (the request stays outstanding)."},
    {"done", handle_done, METH_NOARGS, "True once the request ended."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef kHandleGetSet[] = {
    {"timestamp", handle_ts, NULL, "The request's timestamp.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot kHandleSlots[] = {
    {Py_tp_dealloc, handle_dealloc},
    {Py_tp_methods, kHandleMethods},
    {Py_tp_getset, kHandleGetSet},
    {Py_tp_doc, "A request in flight; wait() for its end."},
    {0, NULL},
};

static PyType_Spec kHandleSpec = {
    "ps.Handle", sizeof(handle_obj_t), 0, Py_TPFLAGS_DEFAULT, kHandleSlots,
};

/* ---- KVWorker ---- */

static int worker_init(PyObject *self, PyObject *args, PyObject *kw)
{
    worker_obj_t *w = (worker_obj_t *)self;
    int app_id, customer_id;
    if (ps__py_worker_args(args, kw, &app_id, &customer_id) < 0)
        return -1;
    if (w->worker) {
        ps__py_raise(PS_ERR_BAD_STATE, "KVWorker already initialised");
        return -1;
    }
    ps_status_t st = ps_kv_worker_create(ps__py_po, app_id, customer_id, &w->worker);
    if (st != PS_OK) {
        ps__py_raise(st, "creating the KV worker");
        return -1;
    }
    w->app_id = app_id;
    w->customer_id = customer_id;
    return 0;
}

static void worker_destroy(worker_obj_t *w)
{
    ps_kv_worker_t *worker = w->worker;
    w->worker = NULL;
    if (worker) {
        Py_BEGIN_ALLOW_THREADS
        ps_kv_worker_destroy(worker);
        Py_END_ALLOW_THREADS
        ps__py_sweep();
    }
    Py_CLEAR(w->slicer); /* no request can call it any more */
}

static PyObject *worker_close(PyObject *self, PyObject *unused)
{
    (void)unused;
    worker_obj_t *w = (worker_obj_t *)self;
    if (w->waiters > 0)
        return ps__py_raise(PS_ERR_BAD_STATE, "closing a KVWorker while a thread waits on it");
    worker_destroy(w);
    Py_RETURN_NONE;
}

static void worker_dealloc(PyObject *self)
{
    worker_destroy((worker_obj_t *)self);
    ps__py_free_object(self);
}

/* Per-key lengths (elements) as an int32 slice; checks they cover `bytes`
 * of `elem`-byte elements. Without lens, checks the uniform split. */
static int lens_get(PyObject *lens, size_t num_keys, size_t bytes, size_t elem, const char *what,
                    ps_slice_t *slice_p)
{
    *slice_p = (ps_slice_t)PS_SLICE_EMPTY_INIT;
    if (!lens || lens == Py_None) {
        if (num_keys == 0 || bytes % (num_keys * elem) != 0) {
            PyErr_Format(PyExc_ValueError,
                         "%s holds %zu bytes, which do not split evenly into %zu key(s) of "
                         "%zu-byte elements (pass lens=)", what, bytes, num_keys, elem);
            return -1;
        }
        return 0;
    }
    PyObject *seq = PySequence_Fast(lens, "lens must be a sequence of ints");
    if (!seq)
        return -1;
    Py_ssize_t n = PySequence_Size(seq);
    if (n != (Py_ssize_t)num_keys) {
        PyErr_Format(PyExc_ValueError, "lens has %zd entries for %zu keys", n, num_keys);
        Py_DECREF(seq);
        return -1;
    }
    ps_status_t st = ps_slice_alloc((size_t)n * sizeof(int32_t), 0, slice_p);
    if (st != PS_OK) {
        Py_DECREF(seq);
        ps__py_raise(st, "allocating lens");
        return -1;
    }
    int32_t *out = ps_slice_ptr(slice_p);
    size_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_GetItem(seq, i);
        long v = item ? PyLong_AsLong(item) : -1;
        Py_XDECREF(item);
        if (PyErr_Occurred() || v < 0 || v > INT32_MAX) {
            PyErr_Clear();
            PyErr_SetString(PyExc_ValueError, "lens must be ints in 0 .. 2**31-1");
            goto fail;
        }
        out[i] = (int32_t)v;
        total += (size_t)v;
    }
    Py_DECREF(seq);
    if (total * elem != bytes) {
        PyErr_Format(PyExc_ValueError, "%s holds %zu bytes but lens add up to %zu elements of %zu "
                     "bytes", what, bytes, total, elem);
        ps_slice_unref(slice_p);
        return -1;
    }
    return 0;
fail:
    Py_DECREF(seq);
    ps_slice_unref(slice_p);
    return -1;
}

/* A handle whose wait() returns `result`, with its completion record (one
 * reference for the handle, one for the request's callback). */
static handle_obj_t *handle_new(PyObject *worker, PyObject *result, const char *what)
{
    done_t *d = malloc(sizeof(*d));
    if (!d) {
        PyErr_NoMemory();
        return NULL;
    }
    atomic_init(&d->refs, 2);
    atomic_init(&d->fired, 0);
    d->status = PS_INPROGRESS;
    handle_obj_t *h = PyObject_New(handle_obj_t, g_handle_type);
    if (!h) {
        free(d);
        return NULL;
    }
    h->worker = worker;
    Py_INCREF(worker);
    h->result = result;
    Py_INCREF(result);
    h->done = d;
    h->finished = 0;
    h->status = PS_INPROGRESS;
    h->what = what;
    h->ts = -1;
    h->any = 0;
    h->type = PS_DATA_OTHER;
    h->out_bytes = 0;
    return h;
}

enum { OP_PUSH, OP_PULL, OP_PUSH_PULL };

static const char *kOpWhat[] = {"push", "pull", "push_pull"};

/* Builds the pairs of one buffer (keys shared, lens shared): takes the
 * view and wraps it. */
static int pairs_of(ps__py_view_t *view, const ps_slice_t *keys, const ps_slice_t *lens,
                    ps_kv_pairs_t *kvs)
{
    memset(kvs, 0, sizeof(*kvs));
    kvs->type = view->type;
    ps_status_t st = ps__py_view_slice(view, &kvs->vals);
    if (st != PS_OK) {
        ps__py_raise(st, "wrapping a buffer");
        return -1;
    }
    kvs->keys = *keys;
    kvs->lens = *lens;
    return 0;
}

/* Drops what a request call holds of one of its buffers: the slice once
 * pairs_of wrapped it, else the view (NULL: none). */
static void buf_release(int wrapped, ps_kv_pairs_t *kvs, ps__py_view_t *view)
{
    if (wrapped)
        ps_slice_unref(&kvs->vals);
    else
        ps__py_view_free(view);
}

static PyObject *worker_request(PyObject *self, int op, PyObject *args, PyObject *kw)
{
    worker_obj_t *w = (worker_obj_t *)self;
    static char *kwlist_push[] = {"keys", "vals", "lens", "cmd", "dtype", NULL};
    static char *kwlist_pull[] = {"keys", "out", "lens", "cmd", "dtype", NULL};
    static char *kwlist_pp[] = {"keys", "vals", "out", "lens", "cmd", "dtype", NULL};
    PyObject *keys_obj, *vals_obj = NULL, *out_obj = NULL, *lens_obj = Py_None, *dtype = Py_None;
    int cmd = 0, ok;
    Py_ssize_t nargs = PyTuple_Size(args);
    if (!kw && nargs == (op == OP_PUSH_PULL ? 3 : 2)) {
        /* The common call, positional keys and buffers only: no keyword
         * parsing (a measurable share of a small round trip). */
        keys_obj = PyTuple_GetItem(args, 0);
        if (op == OP_PULL) {
            out_obj = PyTuple_GetItem(args, 1);
        } else {
            vals_obj = PyTuple_GetItem(args, 1);
            out_obj = op == OP_PUSH_PULL ? PyTuple_GetItem(args, 2) : NULL;
        }
        ok = 1;
    } else if (op == OP_PUSH)
        ok = PyArg_ParseTupleAndKeywords(args, kw, "OO|OiO", kwlist_push, &keys_obj, &vals_obj,
                                         &lens_obj, &cmd, &dtype);
    else if (op == OP_PULL)
        ok = PyArg_ParseTupleAndKeywords(args, kw, "OO|OiO", kwlist_pull, &keys_obj, &out_obj,
                                         &lens_obj, &cmd, &dtype);
    else
        ok = PyArg_ParseTupleAndKeywords(args, kw, "OOO|OiO", kwlist_pp, &keys_obj, &vals_obj,
                                         &out_obj, &lens_obj, &cmd, &dtype);
    if (!ok)
        return NULL;
    if (!w->worker)
        return ps__py_raise(PS_ERR_BAD_STATE, "the KVWorker is closed");
    ps__py_sweep();

    ps_slice_t keys = PS_SLICE_EMPTY_INIT, lens = PS_SLICE_EMPTY_INIT;
    ps__py_view_t *in = NULL, *out = NULL;
    ps_kv_pairs_t in_kvs, out_kvs;
    int in_wrapped = 0, out_wrapped = 0;
    size_t num_keys = 0;
    PyObject *ret = NULL;
    if (ps__py_keys_get(keys_obj, &keys, &num_keys) < 0)
        return NULL;
    if (vals_obj && ps__py_view_get(vals_obj, 0, dtype, "vals", &in) < 0)
        goto out;
    if (out_obj && ps__py_view_get(out_obj, 1, dtype, "out", &out) < 0)
        goto out;
    if (in && out) {
        if (in->type != out->type) {
            PyErr_Format(PyExc_ValueError, "out holds %s, vals holds %s: push_pull needs one dtype",
                         ps__py_dtype_name(out->type), ps__py_dtype_name(in->type));
            goto out;
        }
        if (out->view.len != in->view.len) {
            PyErr_Format(PyExc_ValueError, "out holds %zd bytes, vals %zd: the destination of "
                         "push_pull must be exactly as large", out->view.len, in->view.len);
            goto out;
        }
        if (out->view.buf == in->view.buf) {
            PyErr_SetString(PyExc_ValueError, "push_pull needs out to be another buffer than vals "
                            "(the transport may still read vals when the answer arrives)");
            goto out;
        }
    }
    ps__py_view_t *first = in ? in : out;
    if (lens_get(lens_obj, num_keys, (size_t)first->view.len, ps__py_dtype_size(first->type),
                 in ? "vals" : "out", &lens) < 0)
        goto out;

    /* Pushed device memory that its producer wrote on a stream of its own
     * goes out once that stream's work is done (the worker's ready thread
     * waits, not this call). */
    ps_kv_ready_t ready = {NULL, in ? in->stream : NULL};
    if (in) {
        if (pairs_of(in, &keys, &lens, &in_kvs) < 0) {
            in = NULL;
            goto out;
        }
        in_wrapped = 1;
    }
    if (out) {
        if (pairs_of(out, &keys, &lens, &out_kvs) < 0) {
            out = NULL;
            goto out;
        }
        out_wrapped = 1;
    }

    handle_obj_t *h = handle_new(self, out_obj ? out_obj : Py_None, kOpWhat[op]);
    if (!h)
        goto out;
    if (out_obj) {
        h->type = out_kvs.type;
        h->out_bytes = (Py_ssize_t)ps_slice_len(&out_kvs.vals);
    }
    done_t *d = h->done;

    ps_kv_worker_t *worker = w->worker;
    ps_status_t st;
    int ts = -1;
    Py_BEGIN_ALLOW_THREADS
    if (op == OP_PUSH)
        st = ps_kv_zpush_when(worker, &in_kvs, &ready, cmd, on_done, d, &ts);
    else if (op == OP_PULL)
        st = ps_kv_zpull(worker, &out_kvs, cmd, on_done, d, &ts);
    else
        st = ps_kv_zpushpull_when(worker, &in_kvs, &out_kvs, &ready, cmd, on_done, d, &ts);
    Py_END_ALLOW_THREADS
    if (st != PS_OK) {
        /* Not accepted: the callback will not run. */
        done_unref(d);
        Py_DECREF(h);
        ps__py_raise(st, kOpWhat[op]);
        goto out;
    }
    h->ts = ts;
    ret = (PyObject *)h;
out:
    /* The worker holds its own references now (or none: refused). */
    buf_release(in_wrapped, &in_kvs, in);
    buf_release(out_wrapped, &out_kvs, out);
    ps_slice_unref(&keys);
    ps_slice_unref(&lens);
    ps__py_sweep();
    return ret;
}

static PyObject *worker_push(PyObject *self, PyObject *args, PyObject *kw)
{
    return worker_request(self, OP_PUSH, args, kw);
}

static PyObject *worker_pull(PyObject *self, PyObject *args, PyObject *kw)
{
    return worker_request(self, OP_PULL, args, kw);
}

/* pull_any(keys, dtype='float32', cmd=0): a pull the servers size. */
static PyObject *worker_pull_any(PyObject *self, PyObject *args, PyObject *kw)
{
    worker_obj_t *w = (worker_obj_t *)self;
    static char *kwlist[] = {"keys", "dtype", "cmd", NULL};
    PyObject *keys_obj, *dtype = NULL;
    int cmd = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|Oi", kwlist, &keys_obj, &dtype, &cmd))
        return NULL;
    if (!w->worker)
        return ps__py_raise(PS_ERR_BAD_STATE, "the KVWorker is closed");
    ps_data_type_t type = PS_DATA_FLOAT;
    if (dtype && dtype != Py_None && ps__py_dtype_parse(dtype, &type) < 0)
        return NULL;
    ps__py_sweep();
    ps_slice_t keys = PS_SLICE_EMPTY_INIT;
    size_t num_keys;
    if (ps__py_keys_get(keys_obj, &keys, &num_keys) < 0)
        return NULL;
    handle_obj_t *h = handle_new(self, Py_None, "pull_any");
    if (!h) {
        ps_slice_unref(&keys);
        return NULL;
    }
    h->any = 1;
    h->type = type;
    done_t *d = h->done;
    ps_kv_worker_t *worker = w->worker;
    ps_status_t st;
    int ts = -1;
    Py_BEGIN_ALLOW_THREADS
    st = ps_kv_pull_any(worker, &keys, type, cmd, on_done, d, &ts);
    Py_END_ALLOW_THREADS
    ps_slice_unref(&keys);
    if (st != PS_OK) {
        done_unref(d); /* the callback's: it will not run */
        Py_DECREF(h);
        return ps__py_raise(st, "pull_any");
    }
    h->ts = ts;
    return (PyObject *)h;
}

static PyObject *worker_push_pull(PyObject *self, PyObject *args, PyObject *kw)
{
    return worker_request(self, OP_PUSH_PULL, args, kw);
}

/* ---- a slicer in Python ---- */

/* The C slicer calling the worker's Python one, on whichever thread issues
 * the request (it takes the GIL): fn(keys, num_servers) with keys a
 * read-only memoryview of uint64 (a copy: it may outlive the call), giving
 * one server index per key. A failure (an exception, a wrong count or
 * index) is reported on stderr and refuses the request. */
static ps_status_t py_slicer(void *arg, const ps_key_t *keys, size_t num_keys, int num_servers,
                             int *server_of_key)
{
    worker_obj_t *w = arg;
    ps_status_t st = PS_ERR_INVALID_ARG;
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject *bytes = NULL, *view = NULL, *keys_view = NULL, *got = NULL, *seq = NULL;
    if (!w->slicer)
        goto out;
    bytes = PyBytes_FromStringAndSize((const char *)keys, (Py_ssize_t)(num_keys * sizeof(*keys)));
    view = bytes ? PyMemoryView_FromObject(bytes) : NULL;
    keys_view = view ? PyObject_CallMethod(view, "cast", "s", "Q") : NULL;
    got = keys_view ? PyObject_CallFunction(w->slicer, "Oi", keys_view, num_servers) : NULL;
    seq = got ? PySequence_List(got) : NULL;
    if (!seq)
        goto report;
    if ((size_t)PyList_Size(seq) != num_keys) {
        PyErr_Format(PyExc_ValueError, "the slicer gave %zd servers for %zu keys",
                     PyList_Size(seq), num_keys);
        goto report;
    }
    for (size_t i = 0; i < num_keys; i++) {
        long s = PyLong_AsLong(PyList_GetItem(seq, (Py_ssize_t)i)); /* borrowed */
        if (s == -1 && PyErr_Occurred())
            goto report;
        if (s < 0 || s >= num_servers) {
            PyErr_Format(PyExc_ValueError, "the slicer gave key %zu server %ld of %d", i, s,
                         num_servers);
            goto report;
        }
        server_of_key[i] = (int)s;
    }
    st = PS_OK;
    goto out;
report:
    PyErr_WriteUnraisable(w->slicer);
out:
    Py_XDECREF(seq);
    Py_XDECREF(got);
    Py_XDECREF(keys_view);
    Py_XDECREF(view);
    Py_XDECREF(bytes);
    PyGILState_Release(gil);
    return st;
}

static PyObject *worker_set_slicer(PyObject *self, PyObject *fn)
{
    worker_obj_t *w = (worker_obj_t *)self;
    if (!w->worker)
        return ps__py_raise(PS_ERR_SHUTDOWN, "the KVWorker was closed");
    if (fn != Py_None && !PyCallable_Check(fn)) {
        PyErr_SetString(PyExc_TypeError, "set_slicer takes a function or None");
        return NULL;
    }
    /* Requests issue without the GIL, so the C slicer changes first and
     * the function it calls after (py_slicer reads it under the GIL). */
    if (fn == Py_None) {
        ps_kv_worker_set_slicer(w->worker, NULL, NULL);
        Py_CLEAR(w->slicer);
    } else {
        PyObject *old = w->slicer;
        Py_INCREF(fn);
        w->slicer = fn;
        Py_XDECREF(old);
        ps_kv_worker_set_slicer(w->worker, py_slicer, w);
    }
    Py_RETURN_NONE;
}

/* _c_round_trips(key, vals, out, rounds) -> [ns, ...]: `rounds` push-pull
 * round trips of one key made by the C API itself (ps_kv_zpushpull, then
 * ps_kv_wait; keys and slices made once), each timed, without the GIL. The
 * reference a Python call's overhead is measured against in the same
 * process, connection and server (tests/python/bench_push_pull_worker.py);
 * host buffers only. */
static PyObject *worker_c_round_trips(PyObject *self, PyObject *args)
{
    worker_obj_t *w = (worker_obj_t *)self;
    PyObject *key_obj, *vals_obj, *out_obj;
    Py_ssize_t rounds;
    if (!PyArg_ParseTuple(args, "OOOn", &key_obj, &vals_obj, &out_obj, &rounds))
        return NULL;
    if (!w->worker)
        return ps__py_raise(PS_ERR_BAD_STATE, "the KVWorker is closed");
    if (rounds <= 0)
        return PyList_New(0);
    ps_slice_t keys = PS_SLICE_EMPTY_INIT, lens = PS_SLICE_EMPTY_INIT;
    ps__py_view_t *in = NULL, *out = NULL;
    ps_kv_pairs_t in_kvs, out_kvs;
    int in_wrapped = 0, out_wrapped = 0;
    size_t num_keys;
    uint64_t *ns = NULL;
    PyObject *ret = NULL;
    if (ps__py_keys_get(key_obj, &keys, &num_keys) < 0)
        return NULL;
    if (num_keys != 1) {
        PyErr_SetString(PyExc_ValueError, "_c_round_trips takes one key");
        goto out;
    }
    if (ps__py_view_get(vals_obj, 0, Py_None, "vals", &in) < 0 ||
        ps__py_view_get(out_obj, 1, Py_None, "out", &out) < 0)
        goto out;
    if (in->owner || out->owner || in->view.len != out->view.len) {
        PyErr_SetString(PyExc_ValueError, "_c_round_trips takes two host buffers of one size");
        goto out;
    }
    if (pairs_of(in, &keys, &lens, &in_kvs) < 0) {
        in = NULL;
        goto out;
    }
    in_wrapped = 1;
    if (pairs_of(out, &keys, &lens, &out_kvs) < 0) {
        out = NULL;
        goto out;
    }
    out_wrapped = 1;
    ns = malloc((size_t)rounds * sizeof(*ns));
    if (!ns) {
        PyErr_NoMemory();
        goto out;
    }
    ps_kv_worker_t *worker = w->worker;
    ps_status_t st = PS_OK;
    Py_ssize_t done = 0;
    w->waiters++;
    Py_BEGIN_ALLOW_THREADS
    for (; done < rounds && st == PS_OK; done++) {
        uint64_t t0 = ps_time_now_ns();
        int ts;
        st = ps_kv_zpushpull(worker, &in_kvs, &out_kvs, 0, NULL, NULL, &ts);
        if (st == PS_OK)
            st = ps_kv_wait(worker, ts, -1);
        ns[done] = ps_time_now_ns() - t0;
    }
    Py_END_ALLOW_THREADS
    w->waiters--;
    if (st != PS_OK) {
        ps__py_raise(st, "a C round trip");
        goto out;
    }
    ret = PyList_New(rounds);
    for (Py_ssize_t i = 0; ret && i < rounds; i++) {
        PyObject *item = PyLong_FromUnsignedLongLong(ns[i]);
        if (!item) {
            Py_CLEAR(ret);
            break;
        }
        if (PyList_SetItem(ret, i, item) < 0) {
            Py_CLEAR(ret);
            break;
        }
    }
out:
    free(ns);
    buf_release(in_wrapped, &in_kvs, in);
    buf_release(out_wrapped, &out_kvs, out);
    ps_slice_unref(&keys);
    ps__py_sweep();
    return ret;
}

static PyObject *worker_stats(PyObject *self, PyObject *unused)
{
    (void)unused;
    ps_kv_worker_t *worker = ps__py_worker_get(self);
    if (!worker)
        return NULL;
    ps_kv_worker_stats_t s;
    ps_kv_worker_stats(worker, &s);
    return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K}", "requests",
                         (unsigned long long)s.requests, "messages",
                         (unsigned long long)s.messages, "pull_bytes_in_place",
                         (unsigned long long)s.pull_bytes_in_place, "pull_bytes_copied",
                         (unsigned long long)s.pull_bytes_copied, "pull_bytes_small",
                         (unsigned long long)s.pull_bytes_small, "lane_messages",
                         (unsigned long long)s.lane_messages, "push_bytes_staged",
                         (unsigned long long)s.push_bytes_staged, "push_bytes_ipc",
                         (unsigned long long)s.push_bytes_ipc, "pull_bytes_ipc",
                         (unsigned long long)s.pull_bytes_ipc, "pull_bytes_staged",
                         (unsigned long long)s.pull_bytes_staged, "pull_bytes_piped",
                         (unsigned long long)s.pull_bytes_piped, "push_bytes_piped",
                         (unsigned long long)s.push_bytes_piped);
}

static PyObject *worker_app_id(PyObject *self, void *closure)
{
    (void)closure;
    return PyLong_FromLong(((worker_obj_t *)self)->app_id);
}

static PyObject *worker_customer_id(PyObject *self, void *closure)
{
    (void)closure;
    return PyLong_FromLong(((worker_obj_t *)self)->customer_id);
}

#define KW_METHOD(fn) (PyCFunction)(void (*)(void))(fn), METH_VARARGS | METH_KEYWORDS

static PyMethodDef kWorkerMethods[] = {
    {"push", KW_METHOD(worker_push),
     "push(keys, vals, lens=None, cmd=0, dtype=None) -> Handle"},
    {"pull", KW_METHOD(worker_pull),
     "pull(keys, out, lens=None, cmd=0, dtype=None) -> Handle (wait() returns out)"},
    {"push_pull", KW_METHOD(worker_push_pull),
     "push_pull(keys, vals, out, lens=None, cmd=0, dtype=None) -> Handle"},
    {"pull_any", KW_METHOD(worker_pull_any),
     "pull_any(keys, dtype='float32', cmd=0) -> Handle: a pull the servers size; wait() "
     "returns (values, lens): a typed memoryview of every key's values in key order (no "
     "copy) and each key's element count"},
    {"set_slicer", worker_set_slicer, METH_O,
     "set_slicer(fn): fn(keys, num_servers) -> one server index per key (keys: a read-only "
     "uint64 memoryview of a request's sorted keys), called for every request on the thread "
     "that issues it; None restores the servers' key ranges. Servers out of key order cost a "
     "copy of the request (host memory only). A slicer that raises or answers wrongly is "
     "reported on stderr and the request fails with ps.InvalidArgument. Set it before "
     "issuing requests."},
    {"close", worker_close, METH_NOARGS, "Waits for outstanding requests (bounded), frees."},
    {"stats", worker_stats, METH_NOARGS, "The worker's counters."},
    {"_c_round_trips", worker_c_round_trips, METH_VARARGS,
     "_c_round_trips(key, vals, out, rounds) -> [ns]: round trips made by the C API, for "
     "measuring what a Python call adds (benchmarks only)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef kWorkerGetSet[] = {
    {"app_id", worker_app_id, NULL, "The KV app id.", NULL},
    {"customer_id", worker_customer_id, NULL, "The customer id.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot kWorkerSlots[] = {
    {Py_tp_init, worker_init},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, worker_dealloc},
    {Py_tp_methods, kWorkerMethods},
    {Py_tp_getset, kWorkerGetSet},
    {Py_tp_doc, "KVWorker(app_id=0, customer_id=0): a KV worker of the started job."},
    {0, NULL},
};

static PyType_Spec kWorkerSpec = {
    "ps._KVWorker", sizeof(worker_obj_t), 0, Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    kWorkerSlots,
};

int ps__py_worker_add(PyObject *module)
{
    g_worker_type = ps__py_add_type(module, &kWorkerSpec, "KVWorker");
    g_handle_type = ps__py_add_type(module, &kHandleSpec, "Handle");
    g_result_type = ps__py_add_type(module, &kResultSpec, "_PullResult");
    return g_worker_type && g_handle_type && g_result_type ? 0 : -1;
}
