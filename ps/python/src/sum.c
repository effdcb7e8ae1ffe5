/*
 * The summation server and its worker side from Python:
 *  - _ps.SumServer: ps_sum_server on KV app `app_id` of the started job;
 *  - _ps.SumTensor: a tensor partitioned over the summation servers
 *    (ps_sum_tensor, BYTEPS_PARTITION_BYTES parts), summed in place or into
 *    another buffer without a copy; what ps.torch.push_pull runs on.
 */
#include "ps/python/src/py_internal.h"

#include <string.h>

#include "ps/app/sum/partition.h"
#include "ps/app/sum/sum_server.h"

typedef struct {
    PyObject_HEAD
    ps_sum_server_t *server;
} sum_server_obj_t;

typedef struct {
    PyObject_HEAD
    ps_sum_tensor_t *tensor;
    PyObject *worker;
    ps_data_type_t type;
    size_t bytes;
    int running;
} sum_tensor_obj_t;

static PyTypeObject *g_sum_server_type;
static PyTypeObject *g_sum_tensor_type;

/* ---- SumServer ---- */

static int sum_server_init(PyObject *self, PyObject *args, PyObject *kw)
{
    sum_server_obj_t *s = (sum_server_obj_t *)self;
    int app_id;
    if (ps__py_app_id_arg(args, kw, &app_id) < 0)
        return -1;
    if (s->server) {
        ps__py_raise(PS_ERR_BAD_STATE, "SumServer already initialised");
        return -1;
    }
    ps_status_t st = ps_sum_server_create(ps__py_po, app_id, NULL, &s->server);
    if (st != PS_OK) {
        ps__py_raise(st, "creating the summation server (BYTEPS_* settings)");
        return -1;
    }
    return 0;
}

static void sum_server_stop(sum_server_obj_t *s)
{
    ps_sum_server_t *server = s->server;
    s->server = NULL;
    if (!server)
        return;
    Py_BEGIN_ALLOW_THREADS
    ps_sum_server_destroy(server);
    Py_END_ALLOW_THREADS
}

static PyObject *sum_server_close(PyObject *self, PyObject *unused)
{
    (void)unused;
    sum_server_stop((sum_server_obj_t *)self);
    Py_RETURN_NONE;
}

static PyObject *sum_server_stats(PyObject *self, PyObject *unused)
{
    (void)unused;
    sum_server_obj_t *s = (sum_server_obj_t *)self;
    if (!s->server)
        return ps__py_raise(PS_ERR_BAD_STATE, "the SumServer is closed");
    ps_sum_stats_t st;
    ps_sum_stats(ps_sum_server_sum(s->server), &st);
    return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:K}", "pushes", (unsigned long long)st.pushes,
                         "push_bytes", (unsigned long long)st.push_bytes, "pulls",
                         (unsigned long long)st.pulls, "rounds", (unsigned long long)st.rounds,
                         "keys", (unsigned long long)st.keys, "refused",
                         (unsigned long long)st.refused);
}

static void sum_server_dealloc(PyObject *self)
{
    sum_server_stop((sum_server_obj_t *)self);
    ps__py_free_object(self);
}

static PyMethodDef kSumServerMethods[] = {
    {"close", sum_server_close, METH_NOARGS, "Stops serving (before ps.finalize())."},
    {"stats", sum_server_stats, METH_NOARGS, "The server's counters."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot kSumServerSlots[] = {
    {Py_tp_init, sum_server_init},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, sum_server_dealloc},
    {Py_tp_methods, kSumServerMethods},
    {Py_tp_doc, "SumServer(app_id=0): the summation server (BytePS server semantics)."},
    {0, NULL},
};

static PyType_Spec kSumServerSpec = {
    "ps.SumServer", sizeof(sum_server_obj_t), 0, Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    kSumServerSlots,
};

/* ---- SumTensor ---- */

static int sum_tensor_init(PyObject *self, PyObject *args, PyObject *kw)
{
    sum_tensor_obj_t *t = (sum_tensor_obj_t *)self;
    static char *kwlist[] = {"worker", "tensor_id", "dtype", "nbytes", "part_bytes", NULL};
    PyObject *worker_obj, *dtype;
    unsigned int tensor_id;
    Py_ssize_t nbytes, part_bytes = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OIOn|n", kwlist, &worker_obj, &tensor_id, &dtype,
                                     &nbytes, &part_bytes))
        return -1;
    if (ps__py_require_started() < 0)
        return -1;
    ps_kv_worker_t *worker = ps__py_worker_get(worker_obj);
    if (!worker)
        return -1;
    ps_data_type_t type;
    if (ps__py_dtype_parse(dtype, &type) < 0)
        return -1;
    if (nbytes <= 0 || (size_t)nbytes % ps__py_dtype_size(type) != 0 || part_bytes < 0) {
        PyErr_Format(PyExc_ValueError, "a tensor of %zd bytes is not a whole number (>0) of %s "
                     "elements", nbytes, ps__py_dtype_name(type));
        return -1;
    }
    if (t->tensor) {
        ps__py_raise(PS_ERR_BAD_STATE, "SumTensor already initialised");
        return -1;
    }
    ps_status_t st = ps_sum_tensor_create(worker, ps__py_po, tensor_id, type, (size_t)nbytes,
                                          (size_t)part_bytes, &t->tensor);
    if (st != PS_OK) {
        ps__py_raise(st, "declaring the tensor");
        return -1;
    }
    t->worker = worker_obj;
    Py_INCREF(worker_obj);
    t->type = type;
    t->bytes = (size_t)nbytes;
    return 0;
}

/* A view of `obj` as the tensor's source or destination: of its declared
 * dtype (bfloat16 also as 16-bit integers, numpy having no bfloat16; any
 * type also as raw uint8 bytes) and of its exact size. */
static int tensor_view(sum_tensor_obj_t *t, PyObject *obj, int writable, const char *what,
                       ps__py_view_t **view_p)
{
    ps__py_view_t *v;
    if (ps__py_view_get(obj, writable, Py_None, what, &v) < 0)
        return -1;
    int bits_ok = t->type == PS_DATA_BFLOAT16 &&
                  (v->type == PS_DATA_UINT16 || v->type == PS_DATA_INT16);
    int raw_ok = v->type == PS_DATA_UINT8 || v->type == PS_DATA_CHAR;
    if (v->type != t->type && !bits_ok && !raw_ok) {
        PyErr_Format(PyExc_ValueError, "%s holds %s, the tensor was declared %s", what,
                     ps__py_dtype_name(v->type), ps__py_dtype_name(t->type));
        ps__py_view_free(v);
        return -1;
    }
    if ((size_t)v->view.len != t->bytes) {
        PyErr_Format(PyExc_ValueError, "%s holds %zd bytes, the tensor was declared %zu", what,
                     v->view.len, t->bytes);
        ps__py_view_free(v);
        return -1;
    }
    v->type = t->type;
    *view_p = v;
    return 0;
}

static PyObject *sum_tensor_start(PyObject *self, PyObject *args, PyObject *kw)
{
    sum_tensor_obj_t *t = (sum_tensor_obj_t *)self;
    static char *kwlist[] = {"src", "dst", "stream", NULL};
    PyObject *src_obj, *dst_obj = Py_None, *stream_obj = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|OO", kwlist, &src_obj, &dst_obj, &stream_obj))
        return NULL;
    if (!t->tensor)
        return ps__py_raise(PS_ERR_BAD_STATE, "the SumTensor is closed");
    if (t->running)
        return ps__py_raise(PS_ERR_BAD_STATE, "the tensor's previous push_pull has not been waited");
    ps__py_sweep();
    if (dst_obj == Py_None)
        dst_obj = src_obj;
    ps__py_view_t *src_v, *dst_v;
    if (tensor_view(t, src_obj, dst_obj == src_obj, dst_obj == src_obj ? "tensor" : "src",
                    &src_v) < 0)
        return NULL;
    /* The pushes wait for the producer's stream: the one named, else the
     * one the source's __cuda_array_interface__ names (else default-stream
     * order). Only CUDA memory has streams. */
    ps_kv_ready_t ready = {NULL, src_v->stream};
    if (stream_obj != Py_None) {
        ready.stream = PyLong_AsVoidPtr(stream_obj);
        if (PyErr_Occurred() || src_v->mem_kind != PS_MEM_CUDA) {
            PyErr_Clear();
            PyErr_SetString(PyExc_ValueError, "stream= names a CUDA stream (an int), for a CUDA "
                            "source only");
            ps__py_view_free(src_v);
            return NULL;
        }
    }
    ps_slice_t src = PS_SLICE_EMPTY_INIT, dst = PS_SLICE_EMPTY_INIT;
    ps_status_t st = ps__py_view_slice(src_v, &src);
    if (st != PS_OK)
        return ps__py_raise(st, "wrapping the source");
    if (dst_obj == src_obj) {
        dst = ps_slice_ref(&src);
    } else {
        if (tensor_view(t, dst_obj, 1, "dst", &dst_v) < 0) {
            ps_slice_unref(&src);
            return NULL;
        }
        st = ps__py_view_slice(dst_v, &dst);
        if (st != PS_OK) {
            ps_slice_unref(&src);
            return ps__py_raise(st, "wrapping the destination");
        }
    }
    ps_sum_tensor_t *tensor = t->tensor;
    Py_BEGIN_ALLOW_THREADS
    st = ps_sum_tensor_start_when(tensor, PS_SUM_OP_PUSH_PULL, &src, &dst, &ready);
    Py_END_ALLOW_THREADS
    ps_slice_unref(&src);
    ps_slice_unref(&dst);
    if (st != PS_OK)
        return ps__py_raise(st, "push_pull");
    t->running = 1;
    Py_RETURN_NONE;
}

static PyObject *sum_tensor_wait(PyObject *self, PyObject *args, PyObject *kw)
{
    sum_tensor_obj_t *t = (sum_tensor_obj_t *)self;
    int ms;
    if (ps__py_timeout_arg(args, kw, &ms) < 0)
        return NULL;
    if (!t->tensor)
        return ps__py_raise(PS_ERR_BAD_STATE, "the SumTensor is closed");
    if (!t->running)
        Py_RETURN_NONE;
    ps_sum_tensor_t *tensor = t->tensor;
    ps_status_t st;
    Py_BEGIN_ALLOW_THREADS
    st = ps_sum_tensor_wait(tensor, ms);
    Py_END_ALLOW_THREADS
    if (st != PS_ERR_TIMED_OUT)
        t->running = 0;
    ps__py_sweep();
    if (st != PS_OK)
        return ps__py_raise(st, "push_pull");
    Py_RETURN_NONE;
}

static PyObject *sum_tensor_num_parts(PyObject *self, void *closure)
{
    (void)closure;
    sum_tensor_obj_t *t = (sum_tensor_obj_t *)self;
    return PyLong_FromSize_t(t->tensor ? ps_sum_tensor_num_parts(t->tensor) : 0);
}

static PyObject *sum_tensor_nbytes(PyObject *self, void *closure)
{
    (void)closure;
    return PyLong_FromSize_t(((sum_tensor_obj_t *)self)->bytes);
}

static PyObject *sum_tensor_dtype(PyObject *self, void *closure)
{
    (void)closure;
    return PyUnicode_FromString(ps__py_dtype_name(((sum_tensor_obj_t *)self)->type));
}

static void sum_tensor_stop(sum_tensor_obj_t *t)
{
    ps_sum_tensor_t *tensor = t->tensor;
    t->tensor = NULL;
    if (tensor) {
        Py_BEGIN_ALLOW_THREADS
        ps_sum_tensor_destroy(tensor);
        Py_END_ALLOW_THREADS
    }
    Py_CLEAR(t->worker);
    ps__py_sweep();
}

static PyObject *sum_tensor_close(PyObject *self, PyObject *unused)
{
    (void)unused;
    sum_tensor_stop((sum_tensor_obj_t *)self);
    Py_RETURN_NONE;
}

static void sum_tensor_dealloc(PyObject *self)
{
    sum_tensor_stop((sum_tensor_obj_t *)self);
    ps__py_free_object(self);
}

static PyMethodDef kSumTensorMethods[] = {
    {"start", (PyCFunction)(void (*)(void))sum_tensor_start, METH_VARARGS | METH_KEYWORDS,
     "start(src, dst=None, stream=None): starts the push-pull of every part (dst None: in "
     "place); a CUDA source's parts go out once the work queued on `stream` (a "
     "cudaStream_t as an int; default: the one its __cuda_array_interface__ names, else "
     "default-stream order) is done, without waiting here."},
    {"wait", (PyCFunction)(void (*)(void))sum_tensor_wait, METH_VARARGS | METH_KEYWORDS,
     "wait(timeout=None): blocks without the GIL until every part ended."},
    {"close", sum_tensor_close, METH_NOARGS, "Frees the tensor (waits for an operation)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef kSumTensorGetSet[] = {
    {"num_parts", sum_tensor_num_parts, NULL, "Parts (keys) of the tensor.", NULL},
    {"nbytes", sum_tensor_nbytes, NULL, "The tensor's size in bytes.", NULL},
    {"dtype", sum_tensor_dtype, NULL, "The tensor's element type.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot kSumTensorSlots[] = {
    {Py_tp_init, sum_tensor_init},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, sum_tensor_dealloc},
    {Py_tp_methods, kSumTensorMethods},
    {Py_tp_getset, kSumTensorGetSet},
    {Py_tp_doc, "SumTensor(worker, tensor_id, dtype, nbytes, part_bytes=0): a tensor summed "
                "over every worker through the summation servers."},
    {0, NULL},
};

static PyType_Spec kSumTensorSpec = {
    "ps.SumTensor", sizeof(sum_tensor_obj_t), 0, Py_TPFLAGS_DEFAULT, kSumTensorSlots,
};

int ps__py_sum_add(PyObject *module)
{
    g_sum_server_type = ps__py_add_type(module, &kSumServerSpec, "SumServer");
    g_sum_tensor_type = ps__py_add_type(module, &kSumTensorSpec, "SumTensor");
    return g_sum_server_type && g_sum_tensor_type ? 0 : -1;
}
