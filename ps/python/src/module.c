/*
 * Module _ps: joining and leaving the job (the process's one postoffice),
 * barriers and the job's shape. Every blocking call releases the GIL.
 */
#include "ps/python/src/py_internal.h"

#include <string.h>

#include "ps/app/af.h"
#include "ps/app/sum/sum_server.h"

ps_postoffice_t *ps__py_po;

static PyObject *py_start(PyObject *self, PyObject *args)
{
    (void)self;
    int do_barrier = 1;
    int af = 0;
    if (!PyArg_ParseTuple(args, "|pp", &do_barrier, &af))
        return NULL;
    ps__py_sweep();
    if (ps__py_po)
        return ps__py_raise(PS_ERR_BAD_STATE, "ps is already started");
    ps_start_params_t params;
    ps_status_t st = ps_start_params_from_env(&params);
    if (st != PS_OK)
        return ps__py_raise(st, "reading the DMLC_* settings (see the log line above)");
    if (af)
        ps_af_start_params(&params);
    ps_postoffice_t *po = NULL;
    Py_BEGIN_ALLOW_THREADS
    st = ps_postoffice_start(&params, do_barrier, &po);
    Py_END_ALLOW_THREADS
    if (st != PS_OK)
        return ps__py_raise(st, "joining the job");
    ps__py_po = po;
    Py_RETURN_NONE;
}

static PyObject *py_finalize(PyObject *self, PyObject *args)
{
    (void)self;
    int do_barrier = 1;
    if (!PyArg_ParseTuple(args, "|p", &do_barrier))
        return NULL;
    ps__py_sweep();
    if (!ps__py_po)
        Py_RETURN_NONE;
    ps_postoffice_t *po = ps__py_po;
    ps__py_po = NULL;
    ps_status_t st;
    Py_BEGIN_ALLOW_THREADS
    st = ps_postoffice_finalize(po, do_barrier);
    Py_END_ALLOW_THREADS
    ps__py_sweep();
    if (st != PS_OK)
        return ps__py_raise(st, "leaving the job together");
    Py_RETURN_NONE;
}

static int group_of(PyObject *obj, int *group_p)
{
    if (PyLong_Check(obj)) {
        *group_p = (int)PyLong_AsLong(obj);
        return PyErr_Occurred() ? -1 : 0;
    }
    const char *s = PyUnicode_Check(obj) ? PyUnicode_AsUTF8AndSize(obj, NULL) : NULL;
    static const struct {
        const char *name;
        int group;
    } kGroups[] = {
        {"all", PS_GROUP_ALL},
        {"workers", PS_GROUP_WORKER},
        {"servers", PS_GROUP_SERVER},
        {"scheduler", PS_GROUP_SCHEDULER},
        {"servers+workers", PS_GROUP_SERVER | PS_GROUP_WORKER},
    };
    for (size_t i = 0; s && i < sizeof(kGroups) / sizeof(kGroups[0]); i++) {
        if (strcmp(s, kGroups[i].name) == 0) {
            *group_p = kGroups[i].group;
            return 0;
        }
    }
    PyErr_Clear();
    PyErr_SetString(PyExc_ValueError,
                    "group must be 'all', 'workers', 'servers', 'scheduler', "
                    "'servers+workers' or a node id");
    return -1;
}

static PyObject *py_barrier(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *kwlist[] = {"group", "timeout", NULL};
    PyObject *group_obj = NULL, *timeout = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|OO", kwlist, &group_obj, &timeout))
        return NULL;
    int group = PS_GROUP_ALL, ms;
    if (group_obj && group_of(group_obj, &group) < 0)
        return NULL;
    if (ps__py_timeout_ms(timeout, &ms) < 0 || ps__py_require_started() < 0)
        return NULL;
    ps__py_sweep();
    ps_status_t st;
    Py_BEGIN_ALLOW_THREADS
    st = ps_postoffice_barrier(ps__py_po, group, ms);
    Py_END_ALLOW_THREADS
    if (st != PS_OK)
        return ps__py_raise(st, "barrier");
    Py_RETURN_NONE;
}

#define INT_QUERY(fn, expr)                                 \
    static PyObject *fn(PyObject *self, PyObject *unused)   \
    {                                                       \
        (void)self;                                         \
        (void)unused;                                       \
        if (ps__py_require_started() < 0)                     \
            return NULL;                                    \
        return PyLong_FromLong(expr);                       \
    }

INT_QUERY(py_rank, ps_postoffice_my_rank(ps__py_po))
INT_QUERY(py_my_id, ps_postoffice_my_id(ps__py_po))
INT_QUERY(py_num_workers, ps_postoffice_num_workers(ps__py_po))
INT_QUERY(py_num_servers, ps_postoffice_num_servers(ps__py_po))
INT_QUERY(py_group_size, ps_postoffice_group_size(ps__py_po))
INT_QUERY(py_instance, ps_postoffice_instance(ps__py_po))

static PyObject *py_role(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    if (ps__py_require_started() < 0)
        return NULL;
    return PyUnicode_FromString(ps_role_str(ps_postoffice_role(ps__py_po)));
}

static PyObject *py_van_name(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    if (ps__py_require_started() < 0)
        return NULL;
    return PyUnicode_FromString(ps_postoffice_van_name(ps__py_po));
}

static PyObject *py_is_started(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return PyBool_FromLong(ps__py_po != NULL);
}

/* The whole summation server program (ps_sum_server_run): for
 * `python3 -m ps.server`, which joins, serves and leaves by itself. */
static PyObject *py_sum_server_run(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    int ms;
    if (ps__py_timeout_arg(args, kw, &ms) < 0)
        return NULL;
    if (ps__py_po)
        return ps__py_raise(PS_ERR_BAD_STATE, "the summation server program joins by itself; "
                                            "ps is already started in this process");
    ps_sum_run_result_t report;
    memset(&report, 0, sizeof(report));
    report.rank = -1;
    ps_status_t st;
    Py_BEGIN_ALLOW_THREADS
    st = ps_sum_server_run(NULL, NULL, ms < 0 ? 0 : ms, &report);
    Py_END_ALLOW_THREADS
    if (st != PS_OK)
        return ps__py_raise(st, "summation server");
    return Py_BuildValue("{s:s,s:i,s:K,s:K,s:K}", "role", ps_role_str(report.role), "rank",
                         report.rank, "pushes", (unsigned long long)report.stats.pushes,
                         "pulls", (unsigned long long)report.stats.pulls, "rounds",
                         (unsigned long long)report.stats.rounds);
}

static PyObject *py_set_converter(PyObject *self, PyObject *fn)
{
    (void)self;
    if (ps__py_set_converter(fn) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *py_sweep(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    ps__py_sweep();
    Py_RETURN_NONE;
}

PyTypeObject *ps__py_add_type(PyObject *module, PyType_Spec *spec, const char *name)
{
    PyObject *type = PyType_FromSpec(spec);
    if (!type)
        return NULL;
    Py_INCREF(type); /* one for the module, one for the caller's static */
    if (PyModule_AddObject(module, name, type) < 0) {
        Py_DECREF(type);
        Py_DECREF(type);
        return NULL;
    }
    return (PyTypeObject *)type;
}

void ps__py_free_object(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    freefunc tp_free = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    tp_free(self);
    Py_DECREF(tp);
}

static PyMethodDef kMethods[] = {
    {"start", py_start, METH_VARARGS,
     "start(do_barrier=True, af=False): join the job (DMLC_* settings; af: AF's busy polling)."},
    {"finalize", py_finalize, METH_VARARGS, "finalize(do_barrier=True): leave the job."},
    {"barrier", (PyCFunction)(void (*)(void))py_barrier, METH_VARARGS | METH_KEYWORDS,
     "barrier(group='all', timeout=None)"},
    {"rank", py_rank, METH_NOARGS, "This node's rank in its role (instances counted)."},
    {"my_id", py_my_id, METH_NOARGS, "This node's id."},
    {"num_workers", py_num_workers, METH_NOARGS, "Worker groups in the job."},
    {"num_servers", py_num_servers, METH_NOARGS, "Server groups in the job."},
    {"group_size", py_group_size, METH_NOARGS, "Instances per group (DMLC_GROUP_SIZE)."},
    {"instance", py_instance, METH_NOARGS, "This node's instance in its group."},
    {"role", py_role, METH_NOARGS, "'server', 'worker' or 'scheduler'."},
    {"van_name", py_van_name, METH_NOARGS, "The transport in use."},
    {"is_started", py_is_started, METH_NOARGS, "True between start() and finalize()."},
    {"sum_server_run", (PyCFunction)(void (*)(void))py_sum_server_run,
     METH_VARARGS | METH_KEYWORDS,
     "sum_server_run(timeout=None): the summation server program."},
    {"sweep", py_sweep, METH_NOARGS, "Releases the buffers ps let go of."},
    {"set_converter", py_set_converter, METH_O,
     "set_converter(fn): fn(obj, dtype) -> (buffer, dtype) for objects without the buffer "
     "protocol (torch tensors); None removes it."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef kModule = {
    PyModuleDef_HEAD_INIT, "_ps", "The C half of the ps package.", -1, kMethods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__ps(void)
{
    PyObject *m = PyModule_Create(&kModule);
    if (!m)
        return NULL;
    if (ps__py_errors_add(m) < 0 || ps__py_worker_add(m) < 0 || ps__py_server_add(m) < 0 ||
        ps__py_sum_add(m) < 0 || ps__py_af_add(m) < 0 || ps__py_device_add(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
