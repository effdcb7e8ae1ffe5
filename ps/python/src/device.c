/*
 * Device memory from Python without a copy: objects that describe device
 * memory with __cuda_array_interface__ (CUDA torch tensors, CuPy and Numba
 * arrays) become views of a device kind, and ps.DeviceArray is device
 * memory ps allocates itself (for programs without such a library, and for
 * the emulated kind in tests).
 *
 * The memory's kind comes from the pointer (ps_mem_kind_of), not from the
 * interface's name: memory that no linked device kind claims is refused.
 */
#include "ps/python/src/py_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ps/gpu/mem.h"

/* The buffer-protocol letter of a typestr ("<f4", "|u1"): NULL for one ps
 * does not carry. */
static const char *format_of_typestr(const char *ts)
{
    static const struct {
        const char *typestr;
        const char *format;
    } kMap[] = {
        {"f2", "e"}, {"f4", "f"}, {"f8", "d"}, {"i1", "b"}, {"i2", "h"}, {"i4", "i"},
        {"i8", "q"}, {"u1", "B"}, {"u2", "H"}, {"u4", "I"}, {"u8", "Q"},
    };
    if (ts[0] != '<' && ts[0] != '|' && ts[0] != '=')
        return NULL; /* big-endian ('>') or malformed */
    for (size_t i = 0; i < sizeof(kMap) / sizeof(kMap[0]); i++)
        if (strcmp(ts + 1, kMap[i].typestr) == 0)
            return kMap[i].format;
    return NULL;
}

/* An int item of a tuple as Py_ssize_t; -1 with an exception set. */
static int tuple_ssize(PyObject *tuple, Py_ssize_t i, Py_ssize_t *out)
{
    PyObject *item = PyTuple_GetItem(tuple, i);
    if (!item)
        return -1;
    *out = PyLong_AsSsize_t(item);
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

/* Fills v (shape, itemsize, format, buf, len, readonly, stream) from the
 * interface dict `cai`; -1 with a ValueError naming `what`. */
static int parse_interface(PyObject *cai, const char *what, ps__py_view_t *v)
{
    if (!PyDict_Check(cai)) {
        PyErr_Format(PyExc_ValueError, "%s: __cuda_array_interface__ is not a dict", what);
        return -1;
    }
    PyObject *data = PyDict_GetItemString(cai, "data");
    PyObject *shape = PyDict_GetItemString(cai, "shape");
    PyObject *typestr = PyDict_GetItemString(cai, "typestr");
    PyObject *strides = PyDict_GetItemString(cai, "strides");
    PyObject *mask = PyDict_GetItemString(cai, "mask");
    PyObject *stream = PyDict_GetItemString(cai, "stream");
    if (!data || !PyTuple_Check(data) || PyTuple_Size(data) != 2 || !shape ||
        !PyTuple_Check(shape) || !typestr || !PyUnicode_Check(typestr)) {
        PyErr_Format(PyExc_ValueError, "%s: __cuda_array_interface__ lacks data, shape or typestr",
                     what);
        return -1;
    }
    if (mask && mask != Py_None) {
        PyErr_Format(PyExc_ValueError, "%s is a masked array; ps carries plain arrays", what);
        return -1;
    }
    const char *ts = PyUnicode_AsUTF8AndSize(typestr, NULL);
    const char *format = ts ? format_of_typestr(ts) : NULL;
    if (!format) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s has element type '%U', which ps does not carry", what,
                     typestr);
        return -1;
    }
    Py_ssize_t ndim = PyTuple_Size(shape);
    if (ndim > PS__PY_MAX_DIMS) {
        PyErr_Format(PyExc_ValueError, "%s has %zd dimensions; ps takes at most %d", what, ndim,
                     PS__PY_MAX_DIMS);
        return -1;
    }
    Py_ssize_t itemsize = (Py_ssize_t)strtol(ts + 2, NULL, 10);
    Py_ssize_t count = 1;
    for (Py_ssize_t d = 0; d < ndim; d++) {
        if (tuple_ssize(shape, d, &v->dev_shape[d]) < 0)
            return -1;
        if (v->dev_shape[d] < 0) {
            PyErr_Format(PyExc_ValueError, "%s has a negative extent", what);
            return -1;
        }
        count *= v->dev_shape[d];
    }
    if (strides && strides != Py_None) {
        /* C-contiguous strides are allowed spelled out. */
        if (!PyTuple_Check(strides) || PyTuple_Size(strides) != ndim) {
            PyErr_Format(PyExc_ValueError, "%s: malformed strides", what);
            return -1;
        }
        Py_ssize_t want = itemsize;
        for (Py_ssize_t d = ndim - 1; d >= 0; d--) {
            Py_ssize_t s;
            if (tuple_ssize(strides, d, &s) < 0)
                return -1;
            if (v->dev_shape[d] > 1 && s != want) {
                PyErr_Format(PyExc_ValueError,
                             "%s is not C-contiguous (make it contiguous first, e.g. "
                             "tensor.contiguous())", what);
                return -1;
            }
            want *= v->dev_shape[d];
        }
    }
    PyObject *ptr = PyTuple_GetItem(data, 0);
    PyObject *readonly = PyTuple_GetItem(data, 1);
    v->view.buf = ptr ? PyLong_AsVoidPtr(ptr) : NULL;
    if (PyErr_Occurred())
        return -1;
    v->view.readonly = readonly ? PyObject_IsTrue(readonly) : 0;
    v->view.len = count * itemsize;
    v->view.itemsize = itemsize;
    v->view.ndim = (int)ndim;
    v->view.shape = v->dev_shape;
    v->view.format = (char *)format;
    /* The stream the producer wrote on (version 3): None or 1 (the legacy
     * default stream) need nothing beyond default-stream order. */
    v->stream = NULL;
    if (stream && stream != Py_None) {
        v->stream = PyLong_AsVoidPtr(stream);
        if (PyErr_Occurred())
            return -1;
        if (v->stream == (void *)1)
            v->stream = NULL;
    }
    return 0;
}

int ps__py_view_get_device(PyObject *obj, PyObject *cai, int writable, const char *what,
                           ps__py_view_t **view_p)
{
    ps__py_view_t *v = calloc(1, sizeof(*v));
    if (!v) {
        PyErr_NoMemory();
        return -1;
    }
    if (parse_interface(cai, what, v) < 0) {
        free(v);
        return -1;
    }
    if (writable && v->view.readonly) {
        PyErr_Format(PyExc_ValueError, "%s is read-only; a destination must be writable", what);
        free(v);
        return -1;
    }
    ps_mem_kind_t kind = PS_MEM_HOST;
    int device = 0;
    if (v->view.len > 0 && (v->view.buf == NULL ||
                            ps_mem_kind_of(v->view.buf, &kind, &device) != PS_OK ||
                            kind == PS_MEM_HOST)) {
        PyErr_Format(PyExc_ValueError,
                     "%s: __cuda_array_interface__ memory at %p is not device memory of a kind "
                     "this build of ps has (see ps_info's memory kinds)", what, v->view.buf);
        free(v);
        return -1;
    }
    if (v->stream != NULL && kind != PS_MEM_CUDA) {
        PyErr_Format(PyExc_ValueError, "%s names a stream, which only CUDA memory may", what);
        free(v);
        return -1;
    }
    v->mem_kind = kind;
    v->device = device;
    v->owner = obj;
    Py_INCREF(obj);
    *view_p = v;
    return 0;
}

/* ---- ps.DeviceArray ---- */

typedef struct {
    PyObject_HEAD
    void *ptr;
    size_t nbytes;
    ps_mem_kind_t kind;
    int device;
    const char *typestr;
    int ndim;
    Py_ssize_t shape[PS__PY_MAX_DIMS];
    /* A read-only view (ps__py_device_view): what keeps ptr alive; NULL:
     * memory of our own. */
    PyObject *owner;
} device_obj_t;

static PyTypeObject *g_device_type;

/* The typestr of a dtype name that has one (not bfloat16: pass a uint16
 * array with dtype='bfloat16', as for numpy). */
static const char *typestr_of_dtype(const char *name)
{
    static const char *const kMap[][2] = {
        {"float16", "<f2"}, {"float32", "<f4"}, {"float64", "<f8"}, {"int8", "|i1"},
        {"int16", "<i2"},   {"int32", "<i4"},   {"int64", "<i8"},   {"uint8", "|u1"},
        {"uint16", "<u2"},  {"uint32", "<u4"},  {"uint64", "<u8"},
    };
    for (size_t i = 0; i < sizeof(kMap) / sizeof(kMap[0]); i++)
        if (strcmp(kMap[i][0], name) == 0)
            return kMap[i][1];
    return NULL;
}

/* shape: an int or a tuple of ints (at most PS__PY_MAX_DIMS). */
static int parse_shape(PyObject *shape, device_obj_t *d, Py_ssize_t *count_p)
{
    Py_ssize_t count = 1;
    if (PyLong_Check(shape)) {
        d->ndim = 1;
        d->shape[0] = PyLong_AsSsize_t(shape);
    } else if (PyTuple_Check(shape) && PyTuple_Size(shape) <= PS__PY_MAX_DIMS) {
        d->ndim = (int)PyTuple_Size(shape);
        for (int i = 0; i < d->ndim; i++)
            if (tuple_ssize(shape, i, &d->shape[i]) < 0)
                return -1;
    } else {
        PyErr_Format(PyExc_ValueError, "shape must be an int or a tuple of at most %d ints",
                     PS__PY_MAX_DIMS);
        return -1;
    }
    if (PyErr_Occurred())
        return -1;
    for (int i = 0; i < d->ndim; i++) {
        if (d->shape[i] < 0) {
            PyErr_SetString(PyExc_ValueError, "shape has a negative extent");
            return -1;
        }
        count *= d->shape[i];
    }
    *count_p = count;
    return 0;
}

static int kind_by_name(const char *name, ps_mem_kind_t *kind_p)
{
    for (int k = PS_MEM_HOST + 1; k < PS_MEM_KIND_COUNT; k++) {
        if (strcmp(ps_mem_kind_name((ps_mem_kind_t)k), name) == 0) {
            *kind_p = (ps_mem_kind_t)k;
            return 0;
        }
    }
    return -1;
}

static int device_init(PyObject *self, PyObject *args, PyObject *kw)
{
    device_obj_t *d = (device_obj_t *)self;
    static char *kwlist[] = {"shape", "dtype", "kind", "device", NULL};
    PyObject *shape;
    const char *dtype = "uint8";
    const char *kind_name = "cuda";
    int device = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|ssi", kwlist, &shape, &dtype, &kind_name,
                                     &device))
        return -1;
    if (d->ptr) {
        PyErr_SetString(PyExc_RuntimeError, "DeviceArray is already initialised");
        return -1;
    }
    const char *typestr = typestr_of_dtype(dtype);
    if (!typestr) {
        PyErr_Format(PyExc_ValueError, "DeviceArray takes the dtypes that have a typestr, not "
                     "'%s' (bfloat16: a uint16 array, with dtype='bfloat16' in ps's calls)", dtype);
        return -1;
    }
    Py_ssize_t count;
    if (parse_shape(shape, d, &count) < 0)
        return -1;
    Py_ssize_t nbytes = count * (Py_ssize_t)strtol(typestr + 2, NULL, 10);
    if (nbytes <= 0) {
        PyErr_SetString(PyExc_ValueError, "a DeviceArray holds at least one element");
        return -1;
    }
    ps_mem_kind_t kind;
    if (kind_by_name(kind_name, &kind) < 0) {
        PyErr_Format(PyExc_ValueError, "unknown device memory kind '%s'", kind_name);
        return -1;
    }
    if (!ps_mem_kind_linked(kind)) {
        ps__py_raise(PS_ERR_UNSUPPORTED, "this build of ps has no such memory kind");
        return -1;
    }
    const ps_mem_ops_t *ops = ps_mem_ops(kind);
    ps_status_t st;
    void *ptr = NULL;
    /* The kind's first init may load a driver and create a context:
     * seconds, which other Python threads need not wait out. */
    Py_BEGIN_ALLOW_THREADS
    st = ops->init();
    if (st == PS_OK)
        st = ops->alloc((size_t)nbytes, device, &ptr);
    Py_END_ALLOW_THREADS
    if (st != PS_OK) {
        ps__py_raise(st, "allocating device memory");
        return -1;
    }
    d->ptr = ptr;
    d->nbytes = (size_t)nbytes;
    d->typestr = typestr;
    d->kind = kind;
    d->device = device;
    return 0;
}

static void device_dealloc(PyObject *self)
{
    device_obj_t *d = (device_obj_t *)self;
    if (d->owner) {
        Py_DECREF(d->owner);
    } else if (d->ptr) {
        /* A device free may wait for the device's queued work. */
        const ps_mem_ops_t *ops = ps_mem_ops(d->kind);
        void *ptr = d->ptr;
        Py_BEGIN_ALLOW_THREADS
        (void)ops->free(ptr);
        Py_END_ALLOW_THREADS
    }
    ps__py_free_object(self);
}

PyObject *ps__py_device_view(PyObject *owner, const ps_slice_t *slice, ps_data_type_t type)
{
    size_t nbytes = ps_slice_len(slice);
    const char *name = ps__py_dtype_name(type);
    const char *typestr = name ? typestr_of_dtype(name) : NULL;
    if (type == PS_DATA_BFLOAT16)
        typestr = "<u2"; /* bits, as numpy holds bfloat16 */
    if (!typestr)
        typestr = "|u1";
    size_t elem = (size_t)strtol(typestr + 2, NULL, 10);
    if (nbytes == 0 || nbytes % elem != 0) {
        typestr = "|u1";
        elem = 1;
    }
    device_obj_t *d = PyObject_New(device_obj_t, g_device_type);
    if (!d)
        return NULL;
    d->ptr = ps_slice_ptr(slice);
    d->nbytes = nbytes;
    d->kind = ps_slice_mem_ops_kind(slice);
    d->device = ps_slice_device(slice);
    d->typestr = typestr;
    d->ndim = 1;
    d->shape[0] = (Py_ssize_t)(nbytes / elem);
    Py_INCREF(owner);
    d->owner = owner;
    return (PyObject *)d;
}

static PyObject *device_interface(PyObject *self, void *closure)
{
    (void)closure;
    device_obj_t *d = (device_obj_t *)self;
    if (!d->ptr)
        return ps__py_raise(PS_ERR_BAD_STATE, "DeviceArray is not initialised");
    PyObject *shape = PyTuple_New(d->ndim);
    if (!shape)
        return NULL;
    for (int i = 0; i < d->ndim; i++) {
        PyObject *n = PyLong_FromSsize_t(d->shape[i]);
        if (!n || PyTuple_SetItem(shape, i, n) < 0) {
            Py_DECREF(shape);
            return NULL;
        }
    }
    return Py_BuildValue("{s:N,s:s,s:(NO),s:i,s:O,s:O}", "shape", shape, "typestr", d->typestr,
                         "data", PyLong_FromVoidPtr(d->ptr), d->owner ? Py_True : Py_False,
                         "version", 3, "strides", Py_None, "stream", Py_None);
}

/* upload(buffer) / download(buffer): a synchronous copy of exactly nbytes
 * between the device memory and a host buffer. */
static PyObject *device_copy(PyObject *self, PyObject *obj, int to_device)
{
    device_obj_t *d = (device_obj_t *)self;
    if (!d->ptr)
        return ps__py_raise(PS_ERR_BAD_STATE, "DeviceArray is not initialised");
    if (to_device && d->owner) {
        PyErr_SetString(PyExc_ValueError, "this DeviceArray is a read-only view");
        return NULL;
    }
    Py_buffer b;
    if (PyObject_GetBuffer(obj, &b, to_device ? PyBUF_SIMPLE : PyBUF_WRITABLE) < 0)
        return NULL;
    if ((size_t)b.len != d->nbytes) {
        PyBuffer_Release(&b);
        PyErr_Format(PyExc_ValueError, "the buffer holds %zd bytes, the DeviceArray %zu", b.len,
                     d->nbytes);
        return NULL;
    }
    const ps_mem_ops_t *ops = ps_mem_ops(d->kind);
    ps_status_t st;
    Py_BEGIN_ALLOW_THREADS
    st = to_device ? ops->copy_from_host(d->ptr, b.buf, d->nbytes)
                   : ops->copy_to_host(b.buf, d->ptr, d->nbytes);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&b);
    if (st != PS_OK)
        return ps__py_raise(st, "copying device memory");
    Py_RETURN_NONE;
}

static PyObject *device_upload(PyObject *self, PyObject *obj)
{
    return device_copy(self, obj, 1);
}

static PyObject *device_download(PyObject *self, PyObject *obj)
{
    return device_copy(self, obj, 0);
}

static PyObject *device_nbytes(PyObject *self, void *closure)
{
    (void)closure;
    return PyLong_FromSize_t(((device_obj_t *)self)->nbytes);
}

static PyObject *device_kind(PyObject *self, void *closure)
{
    (void)closure;
    return PyUnicode_FromString(ps_mem_kind_name(((device_obj_t *)self)->kind));
}

static PyObject *device_readonly(PyObject *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(((device_obj_t *)self)->owner != NULL);
}

static PyMethodDef kDeviceMethods[] = {
    {"upload", device_upload, METH_O, "upload(buffer): copy nbytes from host memory in."},
    {"download", device_download, METH_O,
     "download(buffer): copy the nbytes out into a writable host buffer."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef kDeviceGetSet[] = {
    {"__cuda_array_interface__", device_interface, NULL,
     "The memory as an array of its shape and dtype (version 3), so ps and other libraries "
     "take it.", NULL},
    {"nbytes", device_nbytes, NULL, "Size in bytes.", NULL},
    {"kind", device_kind, NULL, "The memory kind: 'cuda' (or 'emu' in test builds).", NULL},
    {"readonly", device_readonly, NULL,
     "True for a view of memory ps holds (a request's values): download() only.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot kDeviceSlots[] = {
    {Py_tp_init, device_init},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, device_dealloc},
    {Py_tp_methods, kDeviceMethods},
    {Py_tp_getset, kDeviceGetSet},
    {Py_tp_doc, "DeviceArray(shape, dtype='uint8', kind='cuda', device=0): a C-contiguous "
                "array in device memory ps allocates, freed with the object; upload() and "
                "download() copy its bytes to and from host buffers."},
    {0, NULL},
};

static PyType_Spec kDeviceSpec = {
    "ps.DeviceArray", sizeof(device_obj_t), 0, Py_TPFLAGS_DEFAULT, kDeviceSlots,
};

int ps__py_device_add(PyObject *module)
{
    g_device_type = ps__py_add_type(module, &kDeviceSpec, "DeviceArray");
    return g_device_type ? 0 : -1;
}

ps_status_t ps__py_view_sync(const ps__py_view_t *view, int timeout_ms)
{
    if (!view->owner || !view->stream)
        return PS_OK;
    const ps_mem_ops_t *ops = ps_mem_ops(view->mem_kind);
    ps_mem_event_h event;
    ps_status_t st = ops->event_create(view->device, &event);
    if (st != PS_OK)
        return st;
    st = ops->event_record(event, view->stream);
    if (st == PS_OK)
        st = ps_mem_event_wait(event, timeout_ms);
    (void)ops->event_destroy(event);
    return st;
}
