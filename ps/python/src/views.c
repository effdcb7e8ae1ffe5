/*
 * Python buffers as ps slices without a copy, their element types, and the
 * release of a buffer once ps let go of it.
 *
 * ps drops its last reference to a slice on one of its own threads, which
 * must not wait for the GIL; the release callback only pushes the view on
 * a lock-free list, and ps__py_sweep() (called with the GIL by every entry
 * point) releases what is there.
 */
#include "ps/python/src/py_internal.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *name;
    ps_data_type_t type;
    size_t size;
    const char *format; /* what the buffer protocol calls it */
} dtype_info_t;

static const dtype_info_t kDtypes[] = {
    {"float32", PS_DATA_FLOAT, 4, "f"},   {"float64", PS_DATA_DOUBLE, 8, "d"},
    {"float16", PS_DATA_FLOAT16, 2, "e"}, {"bfloat16", PS_DATA_BFLOAT16, 2, "H"},
    {"int8", PS_DATA_INT8, 1, "b"},       {"int16", PS_DATA_INT16, 2, "h"},
    {"int32", PS_DATA_INT32, 4, "i"},     {"int64", PS_DATA_INT64, 8, "q"},
    {"uint8", PS_DATA_UINT8, 1, "B"},     {"uint16", PS_DATA_UINT16, 2, "H"},
    {"uint32", PS_DATA_UINT32, 4, "I"},   {"uint64", PS_DATA_UINT64, 8, "Q"},
    {"char", PS_DATA_CHAR, 1, "B"},       {"other", PS_DATA_OTHER, 1, "B"},
};
#define NUM_DTYPES (sizeof(kDtypes) / sizeof(kDtypes[0]))

static const dtype_info_t *dtype_of(ps_data_type_t type)
{
    for (size_t i = 0; i < NUM_DTYPES; i++)
        if (kDtypes[i].type == type)
            return &kDtypes[i];
    return NULL;
}

const char *ps__py_dtype_name(ps_data_type_t type)
{
    const dtype_info_t *d = dtype_of(type);
    return d ? d->name : NULL;
}

size_t ps__py_dtype_size(ps_data_type_t type)
{
    const dtype_info_t *d = dtype_of(type);
    return d ? d->size : 1;
}

const char *ps__py_dtype_format(ps_data_type_t type)
{
    const dtype_info_t *d = dtype_of(type);
    return d ? d->format : "B";
}

int ps__py_dtype_parse(PyObject *name, ps_data_type_t *type_p)
{
    const char *s = PyUnicode_Check(name) ? PyUnicode_AsUTF8AndSize(name, NULL) : NULL;
    if (!s) {
        PyErr_Clear();
        PyErr_SetString(PyExc_ValueError, "dtype must be a name such as 'float32' or 'bfloat16'");
        return -1;
    }
    for (size_t i = 0; i < NUM_DTYPES; i++) {
        if (strcmp(s, kDtypes[i].name) == 0) {
            *type_p = kDtypes[i].type;
            return 0;
        }
    }
    PyErr_Format(PyExc_ValueError, "unknown dtype '%s'", s);
    return -1;
}

/* The element type of a buffer format ("<f", "=i", "B", ...) of `itemsize`
 * bytes: 0, or -1 with a ValueError naming `what`. */
static int type_from_format(const char *format, Py_ssize_t itemsize, const char *what,
                            ps_data_type_t *type_p)
{
    const char *f = format ? format : "B";
    if (*f == '>' || *f == '!') {
        PyErr_Format(PyExc_ValueError, "%s is big-endian (format '%s'); ps sends host byte order",
                     what, f);
        return -1;
    }
    if (*f == '@' || *f == '=' || *f == '<')
        f++;
    if (f[0] == '\0' || f[1] != '\0') {
        PyErr_Format(PyExc_ValueError, "%s has format '%s'; ps takes arrays of one numeric type",
                     what, format);
        return -1;
    }
    int is_signed = 0, is_int = 1;
    switch (f[0]) {
    case 'b': case 'h': case 'i': case 'l': case 'q': case 'n':
        is_signed = 1;
        break;
    case 'B': case 'H': case 'I': case 'L': case 'Q': case 'N':
        break;
    case 'c':
        *type_p = PS_DATA_CHAR;
        return 0;
    case 'e': case 'f': case 'd':
        is_int = 0;
        break;
    default:
        PyErr_Format(PyExc_ValueError, "%s has element format '%s', which ps does not carry",
                     what, format);
        return -1;
    }
    if (!is_int) {
        *type_p = itemsize == 2 ? PS_DATA_FLOAT16 : itemsize == 4 ? PS_DATA_FLOAT : PS_DATA_DOUBLE;
        return 0;
    }
    static const ps_data_type_t kSigned[] = {PS_DATA_INT8, PS_DATA_INT16, PS_DATA_INT32,
                                             PS_DATA_INT64};
    static const ps_data_type_t kUnsigned[] = {PS_DATA_UINT8, PS_DATA_UINT16, PS_DATA_UINT32,
                                               PS_DATA_UINT64};
    int idx = itemsize == 1 ? 0 : itemsize == 2 ? 1 : itemsize == 4 ? 2 : itemsize == 8 ? 3 : -1;
    if (idx < 0) {
        PyErr_Format(PyExc_ValueError, "%s has %zd-byte integers", what, itemsize);
        return -1;
    }
    *type_p = is_signed ? kSigned[idx] : kUnsigned[idx];
    return 0;
}

/* Turns objects without the buffer protocol (torch tensors) into ones
 * with it: a Python callable (obj, dtype) -> (buffer, dtype), set by the
 * package; NULL until then. */
static PyObject *g_converter;

int ps__py_set_converter(PyObject *fn)
{
    if (fn != Py_None && !PyCallable_Check(fn)) {
        PyErr_SetString(PyExc_TypeError, "the converter must be callable or None");
        return -1;
    }
    Py_XDECREF(g_converter);
    g_converter = fn == Py_None ? NULL : fn;
    Py_XINCREF(g_converter);
    return 0;
}

static int view_get_buffer(PyObject *obj, int writable, PyObject *dtype, const char *what,
                           ps__py_view_t **view_p);
/* The element type of v from its format, narrowed by `dtype` (a name, may
 * be NULL or None); -1 with a ValueError. */
static int view_set_type(ps__py_view_t *v, PyObject *dtype, const char *what);

/* Device memory when obj has a __cuda_array_interface__, else a buffer. */
static int view_get_any(PyObject *obj, int writable, PyObject *dtype, const char *what,
                        ps__py_view_t **view_p)
{
    if (!PyObject_CheckBuffer(obj)) {
        PyObject *cai = PyObject_GetAttrString(obj, "__cuda_array_interface__");
        if (cai) {
            int rc = ps__py_view_get_device(obj, cai, writable, what, view_p);
            Py_DECREF(cai);
            if (rc == 0 && view_set_type(*view_p, dtype, what) < 0) {
                ps__py_view_free(*view_p);
                *view_p = NULL;
                return -1;
            }
            return rc;
        }
        PyErr_Clear();
    }
    return view_get_buffer(obj, writable, dtype, what, view_p);
}

int ps__py_view_get(PyObject *obj, int writable, PyObject *dtype, const char *what,
                  ps__py_view_t **view_p)
{
    if (PyObject_CheckBuffer(obj) || !g_converter)
        return view_get_any(obj, writable, dtype, what, view_p);
    PyObject *res = PyObject_CallFunctionObjArgs(g_converter, obj, dtype ? dtype : Py_None, NULL);
    if (!res)
        return -1;
    PyObject *buf, *dt;
    int rc = -1;
    if (!PyArg_ParseTuple(res, "OO", &buf, &dt))
        PyErr_SetString(PyExc_TypeError, "the converter must return (buffer, dtype)");
    else
        rc = view_get_any(buf, writable, dt, what, view_p);
    Py_DECREF(res);
    return rc;
}

static int view_get_buffer(PyObject *obj, int writable, PyObject *dtype, const char *what,
                           ps__py_view_t **view_p)
{
    if (!PyObject_CheckBuffer(obj)) {
        PyErr_Format(PyExc_TypeError,
                     "%s must support the buffer protocol (numpy array, bytes, memoryview, "
                     "torch tensor via ps.torch), not %R", what, (PyObject *)Py_TYPE(obj));
        return -1;
    }
    ps__py_view_t *v = calloc(1, sizeof(*v));
    if (!v) {
        PyErr_NoMemory();
        return -1;
    }
    if (PyObject_GetBuffer(obj, &v->view, PyBUF_FULL_RO) < 0) {
        free(v);
        return -1;
    }
    const char *err = NULL;
    if (!PyBuffer_IsContiguous(&v->view, 'C'))
        err = "is not C-contiguous (make it contiguous first, e.g. numpy.ascontiguousarray "
              "or tensor.contiguous())";
    else if (writable && v->view.readonly)
        err = "is read-only; a destination must be writable";
    if (err) {
        PyErr_Format(PyExc_ValueError, "%s %s", what, err);
        ps__py_view_free(v);
        return -1;
    }
    if (view_set_type(v, dtype, what) < 0) {
        ps__py_view_free(v);
        return -1;
    }
    *view_p = v;
    return 0;
}

static int view_set_type(ps__py_view_t *v, PyObject *dtype, const char *what)
{
    ps_data_type_t from_format;
    if (type_from_format(v->view.format, v->view.itemsize, what, &from_format) < 0)
        return -1;
    v->type = from_format;
    if (dtype && dtype != Py_None) {
        ps_data_type_t wanted;
        if (ps__py_dtype_parse(dtype, &wanted) < 0)
            return -1;
        size_t size = ps__py_dtype_size(wanted);
        /* The same item size reinterprets (uint16 bits as bfloat16); raw
         * bytes may be any type whose elements they hold whole. */
        int ok = (size_t)v->view.itemsize == size ||
                 (v->view.itemsize == 1 && v->view.len % (Py_ssize_t)size == 0);
        if (!ok) {
            PyErr_Format(PyExc_ValueError,
                         "%s holds %zd-byte elements (format '%s'), dtype %s has %zu-byte ones",
                         what, v->view.itemsize, v->view.format ? v->view.format : "B",
                         ps__py_dtype_name(wanted), size);
            return -1;
        }
        v->type = wanted;
    }
    return 0;
}

void ps__py_view_free(ps__py_view_t *view)
{
    if (!view)
        return;
    if (view->owner)
        Py_DECREF(view->owner);
    else
        PyBuffer_Release(&view->view);
    free(view);
}

/* Views ps let go of, waiting for the GIL (a Treiber stack: pushed by any
 * thread, emptied whole by ps__py_sweep). */
static _Atomic(ps__py_view_t *) g_released;

static void view_released(void *data, size_t len, void *arg)
{
    (void)data;
    (void)len;
    ps__py_view_t *v = arg;
    ps__py_view_t *head = atomic_load_explicit(&g_released, memory_order_relaxed);
    do {
        v->next = head;
    } while (!atomic_compare_exchange_weak_explicit(&g_released, &head, v, memory_order_release,
                                                    memory_order_relaxed));
}

ps_status_t ps__py_view_slice(ps__py_view_t *view, ps_slice_t *slice_p)
{
    ps_status_t st;
    if (view->owner) {
        ps_buf_t *buf;
        st = ps_buf_wrap_mem(view->view.buf, (size_t)view->view.len, (ps_buf_mem_t)view->mem_kind,
                             view->device, view_released, view, &buf);
        if (st == PS_OK) {
            /* The slice takes the only reference. */
            *slice_p = (ps_slice_t){buf, 0, (size_t)view->view.len};
            return PS_OK;
        }
    } else {
        st = ps_slice_wrap(view->view.buf, (size_t)view->view.len, view_released, view, slice_p);
    }
    if (st != PS_OK)
        ps__py_view_free(view);
    return st;
}

void ps__py_sweep(void)
{
    ps__py_view_t *v = atomic_exchange_explicit(&g_released, NULL, memory_order_acquire);
    while (v) {
        ps__py_view_t *next = v->next;
        ps__py_view_free(v);
        v = next;
    }
}

int ps__py_keys_get(PyObject *obj, ps_slice_t *slice_p, size_t *num_p)
{
    PyObject *seq = NULL;
    Py_ssize_t n;
    if (PyLong_Check(obj)) {
        n = 1;
    } else {
        seq = PySequence_Fast(obj, "keys must be an int or a sequence of ints");
        if (!seq)
            return -1;
        n = PySequence_Size(seq);
        if (n < 0) {
            Py_DECREF(seq);
            return -1;
        }
    }
    ps_status_t st = ps_slice_alloc((size_t)n * sizeof(ps_key_t), 0, slice_p);
    if (st != PS_OK) {
        Py_XDECREF(seq);
        ps__py_raise(st, "allocating the keys");
        return -1;
    }
    ps_key_t *keys = ps_slice_ptr(slice_p);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = seq ? PySequence_GetItem(seq, i) : (Py_INCREF(obj), obj);
        unsigned long long k = item ? PyLong_AsUnsignedLongLong(item) : (unsigned long long)-1;
        Py_XDECREF(item);
        if (PyErr_Occurred()) {
            PyErr_SetString(PyExc_ValueError, "keys must be ints in 0 .. 2**64-1");
            goto fail;
        }
        keys[i] = k;
        if (i > 0 && keys[i] <= keys[i - 1]) {
            PyErr_SetString(PyExc_ValueError, "keys must be sorted and unique");
            goto fail;
        }
    }
    Py_XDECREF(seq);
    *num_p = (size_t)n;
    return 0;
fail:
    Py_XDECREF(seq);
    ps_slice_unref(slice_p);
    return -1;
}

int ps__py_timeout_ms(PyObject *timeout, int *ms_p)
{
    if (!timeout || timeout == Py_None) {
        *ms_p = -1;
        return 0;
    }
    double s = PyFloat_AsDouble(timeout);
    if (s == -1.0 && PyErr_Occurred())
        return -1;
    if (s < 0 || s > 2147483.0) {
        PyErr_SetString(PyExc_ValueError, "timeout must be None or 0 .. 2147483 seconds");
        return -1;
    }
    *ms_p = (int)(s * 1000.0 + 0.5);
    return 0;
}

int ps__py_timeout_arg(PyObject *args, PyObject *kw, int *ms_p)
{
    static char *kwlist[] = {"timeout", NULL};
    PyObject *timeout = Py_None;
    if (kw || PyTuple_Size(args) > 0) {
        if (!PyArg_ParseTupleAndKeywords(args, kw, "|O", kwlist, &timeout))
            return -1;
    }
    return ps__py_timeout_ms(timeout, ms_p);
}

int ps__py_app_id_arg(PyObject *args, PyObject *kw, int *app_id_p)
{
    static char *kwlist[] = {"app_id", NULL};
    *app_id_p = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|i", kwlist, app_id_p))
        return -1;
    return ps__py_require_started();
}

int ps__py_worker_args(PyObject *args, PyObject *kw, int *app_id_p, int *customer_id_p)
{
    static char *kwlist[] = {"app_id", "customer_id", NULL};
    *app_id_p = 0;
    *customer_id_p = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|ii", kwlist, app_id_p, customer_id_p))
        return -1;
    return ps__py_require_started();
}

int ps__py_slice_getbuffer(PyObject *owner, const ps_slice_t *slice, ps_data_type_t type,
                           int readonly, Py_ssize_t shape_strides[2], Py_buffer *view, int flags)
{
    if (readonly && (flags & PyBUF_WRITABLE)) {
        PyErr_SetString(PyExc_BufferError, "these values are read-only");
        return -1;
    }
    if (!ps_slice_in_host_mem(slice)) {
        PyErr_SetString(PyExc_BufferError, "the values are not in host memory");
        return -1;
    }
    size_t elem = ps__py_dtype_size(type);
    size_t len = ps_slice_len(slice);
    static char kEmpty[1];
    view->buf = len ? ps_slice_ptr(slice) : kEmpty;
    view->obj = owner;
    Py_INCREF(owner);
    view->len = (Py_ssize_t)len;
    view->readonly = readonly;
    view->itemsize = (Py_ssize_t)elem;
    view->format = (flags & PyBUF_FORMAT) ? (char *)ps__py_dtype_format(type) : NULL;
    view->ndim = 1;
    shape_strides[0] = (Py_ssize_t)(len / elem);
    shape_strides[1] = (Py_ssize_t)elem;
    view->shape = (flags & PyBUF_ND) ? &shape_strides[0] : NULL;
    view->strides = (flags & PyBUF_STRIDES) ? &shape_strides[1] : NULL;
    view->suboffsets = NULL;
    view->internal = NULL;
    return 0;
}
