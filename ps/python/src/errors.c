/*
 * ps statuses as Python exceptions: one base class ps.Error, one class per
 * status group (ps/base/status.h) and, under them, one per status a caller
 * tells apart. Every instance carries .status (the number) and .name
 * ("PS_ERR_TIMED_OUT").
 */
#include "ps/python/src/py_internal.h"

#include <stdio.h>

typedef struct {
    const char *name;   /* the attribute of module ps */
    int parent;         /* index in kClasses, -1 for the base */
    ps_status_t status; /* PS_OK for a group class */
    const char *doc;
} error_class_t;

enum { ERR_BASE, ERR_CALL, ERR_RESOURCE, ERR_TIME, ERR_PEER, ERR_LINK, ERR_JOB };

static const error_class_t kClasses[] = {
    [ERR_BASE] = {"Error", -1, PS_OK, "A ps call failed; .status and .name say why."},
    [ERR_CALL] = {"CallError", ERR_BASE, PS_OK, "The call itself was refused."},
    [ERR_RESOURCE] = {"ResourceError", ERR_BASE, PS_OK, "A local resource ran out or failed."},
    [ERR_TIME] = {"TimeError", ERR_BASE, PS_OK, "A deadline passed or the call was cancelled."},
    [ERR_PEER] = {"PeerError", ERR_BASE, PS_OK, "One peer is gone, refused or misbehaved."},
    [ERR_LINK] = {"LinkError", ERR_BASE, PS_OK, "A connection or device failed."},
    [ERR_JOB] = {"JobError", ERR_BASE, PS_OK, "The job is misconfigured or shutting down."},
    {"InvalidArgument", ERR_CALL, PS_ERR_INVALID_ARG, "ps refused an argument."},
    {"Unsupported", ERR_CALL, PS_ERR_UNSUPPORTED, "Not supported here."},
    {"NotFound", ERR_CALL, PS_ERR_NOT_FOUND, "No value (e.g. a key never pushed, a failed round)."},
    {"BadState", ERR_CALL, PS_ERR_BAD_STATE, "Not valid in the current state."},
    {"TimedOut", ERR_TIME, PS_ERR_TIMED_OUT, "The deadline passed."},
    {"Cancelled", ERR_TIME, PS_ERR_CANCELLED, "The operation was cancelled."},
    {"PeerGone", ERR_PEER, PS_ERR_PEER_GONE, "A node the call needed is dead."},
    {"ProtocolError", ERR_PEER, PS_ERR_PROTOCOL, "A peer broke the protocol."},
    {"AuthError", ERR_PEER, PS_ERR_AUTH, "A peer failed authentication."},
    {"LinkFailed", ERR_LINK, PS_ERR_LINK_FAILED, "The connection to a peer failed."},
    {"ConfigError", ERR_JOB, PS_ERR_CONFIG, "The job is misconfigured."},
    {"Shutdown", ERR_JOB, PS_ERR_SHUTDOWN, "This node or the job is shutting down."},
};
#define NUM_CLASSES (sizeof(kClasses) / sizeof(kClasses[0]))

static PyObject *g_classes[NUM_CLASSES];

int ps__py_errors_add(PyObject *module)
{
    for (size_t i = 0; i < NUM_CLASSES; i++) {
        if (g_classes[i])
            continue;
        char qualified[64];
        snprintf(qualified, sizeof(qualified), "ps.%s", kClasses[i].name);
        PyObject *base = kClasses[i].parent < 0 ? PyExc_RuntimeError
                                                : g_classes[kClasses[i].parent];
        g_classes[i] = PyErr_NewExceptionWithDoc(qualified, kClasses[i].doc, base, NULL);
        if (!g_classes[i])
            return -1;
    }
    for (size_t i = 0; i < NUM_CLASSES; i++) {
        Py_INCREF(g_classes[i]);
        if (PyModule_AddObject(module, kClasses[i].name, g_classes[i]) < 0) {
            Py_DECREF(g_classes[i]);
            return -1;
        }
    }
    return 0;
}

static int class_of(ps_status_t status)
{
    for (size_t i = 0; i < NUM_CLASSES; i++)
        if (kClasses[i].status == status && status != PS_OK)
            return (int)i;
    if (PS_STATUS_IS_CALL_ERR(status))
        return ERR_CALL;
    if (PS_STATUS_IS_RESOURCE_ERR(status))
        return ERR_RESOURCE;
    if (PS_STATUS_IS_TIME_ERR(status))
        return ERR_TIME;
    if (PS_STATUS_IS_PEER_ERR(status))
        return ERR_PEER;
    if (PS_STATUS_IS_LINK_ERR(status))
        return ERR_LINK;
    if (PS_STATUS_IS_JOB_ERR(status))
        return ERR_JOB;
    return ERR_BASE;
}

int ps__py_status_of(PyObject *obj, ps_status_t *status_p)
{
    if (PyLong_Check(obj)) {
        long v = PyLong_AsLong(obj);
        if (v == -1 && PyErr_Occurred())
            return -1;
        if (v < INT32_MIN || v > INT32_MAX) {
            PyErr_Format(PyExc_ValueError, "%ld is no ps status", v);
            return -1;
        }
        *status_p = (ps_status_t)v;
        return 0;
    }
    if (PyObject_HasAttrString(obj, "status") && !PyType_Check(obj)) {
        PyObject *code = PyObject_GetAttrString(obj, "status");
        int rc = code != NULL && PyLong_Check(code) ? ps__py_status_of(code, status_p) : -1;
        Py_XDECREF(code);
        if (rc == 0 || PyErr_Occurred())
            return rc;
    }
    PyObject *cls = PyType_Check(obj) ? obj : (PyObject *)Py_TYPE(obj);
    for (size_t i = 0; i < NUM_CLASSES; i++) {
        if (g_classes[i] == cls && kClasses[i].status != PS_OK) {
            *status_p = kClasses[i].status;
            return 0;
        }
    }
    PyErr_SetString(PyExc_ValueError,
                    "an error must be a status number or a ps error that names one status "
                    "(ps.NotFound, ps.InvalidArgument, ...), not a group such as ps.CallError");
    return -1;
}

PyObject *ps__py_raise(ps_status_t status, const char *what)
{
    PyObject *cls = g_classes[class_of(status)];
    PyObject *exc = PyObject_CallFunction(cls, "s", what);
    if (!exc)
        return NULL;
    PyObject *msg = PyUnicode_FromFormat("%s: %s (%s)", what, ps_status_str(status),
                                         ps_status_name(status));
    PyObject *code = PyLong_FromLong(status);
    PyObject *name = PyUnicode_FromString(ps_status_name(status));
    if (msg && code && name) {
        PyObject *args = PyTuple_Pack(1, msg);
        if (args) {
            PyObject_SetAttrString(exc, "args", args);
            Py_DECREF(args);
        }
        PyObject_SetAttrString(exc, "status", code);
        PyObject_SetAttrString(exc, "name", name);
    }
    Py_XDECREF(msg);
    Py_XDECREF(code);
    Py_XDECREF(name);
    if (PyErr_Occurred()) {
        Py_DECREF(exc);
        return NULL;
    }
    PyErr_SetObject(cls, exc);
    Py_DECREF(exc);
    return NULL;
}

int ps__py_require_started(void)
{
    if (ps__py_po)
        return 0;
    ps__py_raise(PS_ERR_BAD_STATE, "ps is not started (call ps.init() first)");
    return -1;
}
