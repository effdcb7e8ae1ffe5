/*
 * Internals of the _ps extension module (the C half of the Python package
 * `ps`): written against CPython's stable ABI (Py_LIMITED_API 3.11, set by
 * the build), one module-wide postoffice per process.
 *
 * Threads: ps calls back on its own threads (request completions, server
 * handlers, buffer releases). Those never take the GIL: they record what
 * happened in C (a flag, a queue, a list of views to release), and Python
 * code picks it up on a thread that holds the GIL.
 */
#ifndef PS_PYTHON_SRC_PY_INTERNAL_H_
#define PS_PYTHON_SRC_PY_INTERNAL_H_

#include <Python.h>
#include <stddef.h>

#include "ps/app/kv.h"
#include "ps/base/buffer.h"
#include "ps/base/status.h"
#include "ps/net/codec/message.h"
#include "ps/net/postoffice.h"

/* The started postoffice, NULL before init() and after finalize(). */
extern ps_postoffice_t *ps__py_po;

/* Raises the exception class of `status` (ps.TimedOut, ps.PeerGone, ...)
 * with "<what>: <status words>"; returns NULL. */
PyObject *ps__py_raise(ps_status_t status, const char *what);
/* The status `obj` names: an int, a ps.Error subclass that stands for one
 * status (ps.NotFound, ...) or an instance of one (its .status). 0 and
 * *status_p set, or -1 with ValueError raised. */
int ps__py_status_of(PyObject *obj, ps_status_t *status_p);
/* 0 when the postoffice is started; else raises ps.BadState, -1. */
int ps__py_require_started(void);
/* Creates the exception classes and adds them to the module. */
int ps__py_errors_add(PyObject *module);

/* ---- element types ---- */

/* The data type's name ("float32", ...), NULL for an unknown one. */
const char *ps__py_dtype_name(ps_data_type_t type);
/* Element size in bytes (1 for CHAR / OTHER). */
size_t ps__py_dtype_size(ps_data_type_t type);
/* A struct-module format for the type's elements ("f", "e", ...). */
const char *ps__py_dtype_format(ps_data_type_t type);
/* Parses a dtype name; -1 with ValueError for an unknown one. */
int ps__py_dtype_parse(PyObject *name, ps_data_type_t *type_p);

/* ---- zero-copy views of Python buffers ---- */

#define PS__PY_MAX_DIMS 8

/* A Python buffer held while ps may use its bytes. Released under the GIL:
 * a ps thread that lets go of it only queues it (ps__py_sweep releases).
 * Device memory (an object with __cuda_array_interface__) has `owner` set,
 * and view.buf, len, itemsize, ndim, shape, format, readonly filled from
 * the interface; its other fields are unused. */
typedef struct ps__py_view {
    Py_buffer view;
    ps_data_type_t type;
    struct ps__py_view *next;
    PyObject *owner;        /* device memory: the object, referenced */
    ps_mem_kind_t mem_kind; /* PS_MEM_HOST for a Python buffer */
    int device;
    void *stream;           /* the stream the producer wrote on; NULL: default order */
    Py_ssize_t dev_shape[PS__PY_MAX_DIMS];
} ps__py_view_t;

/* Takes a C-contiguous buffer of `obj` (writable when `writable`) and its
 * element type: the buffer's format, or `dtype` (a name, may be NULL or
 * None) which must agree with the item size (or reinterpret raw bytes).
 * `what` names the argument in error messages. ValueError for a
 * non-contiguous, read-only (when writable), big-endian or untyped buffer;
 * TypeError for an object without the buffer protocol that the converter
 * (ps__py_set_converter) does not turn into one. */
int ps__py_view_get(PyObject *obj, int writable, PyObject *dtype, const char *what,
                  ps__py_view_t **view_p);
/* A view of the device memory `obj` describes with its
 * __cuda_array_interface__ dict `cai`; the memory's kind is the linked
 * device kind that claims the pointer. -1 with a ValueError. */
int ps__py_view_get_device(PyObject *obj, PyObject *cai, int writable, const char *what,
                           ps__py_view_t **view_p);
/* Waits (GIL released by the caller) up to timeout_ms until the work the
 * view's producer queued on its stream is done; PS_OK at once for a host
 * view or one without a stream. For APIs without readiness events. */
ps_status_t ps__py_view_sync(const ps__py_view_t *view, int timeout_ms);
/* Sets the callable that turns other objects (torch tensors) into buffers:
 * fn(obj, dtype) -> (buffer, dtype); None removes it. */
int ps__py_set_converter(PyObject *fn);
/* Releases a view that was never handed to ps (GIL held). */
void ps__py_view_free(ps__py_view_t *view);
/* Wraps the view's bytes as a slice without a copy; the view is released
 * (through ps__py_sweep) once ps dropped its last reference. On failure the
 * view is released at once. */
ps_status_t ps__py_view_slice(ps__py_view_t *view, ps_slice_t *slice_p);
/* Fills *view (bf_getbuffer) with a slice's host bytes as a typed
 * one-dimensional buffer owned by `owner`; shape_strides is storage of the
 * owner's for the shape and stride. -1 with BufferError for a writable
 * request of read-only values, or values not in host memory. */
int ps__py_slice_getbuffer(PyObject *owner, const ps_slice_t *slice, ps_data_type_t type,
                           int readonly, Py_ssize_t shape_strides[2], Py_buffer *view, int flags);
/* Releases every view ps let go of (GIL held). */
void ps__py_sweep(void);

/* Keys from an int, a sequence of ints or a uint64 buffer, as a slice of
 * its own (copied, sorted check included). -1 with an exception. */
int ps__py_keys_get(PyObject *obj, ps_slice_t *slice_p, size_t *num_p);

/* ---- types ---- */

int ps__py_worker_add(PyObject *module);
int ps__py_server_add(PyObject *module);
int ps__py_sum_add(PyObject *module);
int ps__py_af_add(PyObject *module);
int ps__py_device_add(PyObject *module);
/* A read-only ps.DeviceArray over the device memory `slice` names, one
 * dimension of `type` (raw bytes when it has no typestr), keeping `owner`
 * (which keeps the memory) alive. NULL with an exception. */
PyObject *ps__py_device_view(PyObject *owner, const ps_slice_t *slice, ps_data_type_t type);

/* The C worker of a ps.KVWorker object (raises and NULL when closed). */
ps_kv_worker_t *ps__py_worker_get(PyObject *obj);
/* Timeout in seconds (None: the default) as milliseconds (-1 default). */
int ps__py_timeout_ms(PyObject *timeout, int *ms_p);
/* Parses the one optional argument `timeout` of a method. */
int ps__py_timeout_arg(PyObject *args, PyObject *kw, int *ms_p);
/* Parses the one optional argument `app_id` of a constructor and checks
 * that ps is started. */
int ps__py_app_id_arg(PyObject *args, PyObject *kw, int *app_id_p);
/* Parses the optional arguments `app_id`, `customer_id` of a worker's
 * constructor and checks that ps is started. */
int ps__py_worker_args(PyObject *args, PyObject *kw, int *app_id_p, int *customer_id_p);

/* Makes the type of `spec` and adds it to the module as `name`; NULL with
 * an exception. */
PyTypeObject *ps__py_add_type(PyObject *module, PyType_Spec *spec, const char *name);
/* The end of a dealloc of one of the module's (heap) types. */
void ps__py_free_object(PyObject *self);

#endif /* PS_PYTHON_SRC_PY_INTERNAL_H_ */
