"""Joining and leaving the job: init, finalize, barrier, and the job's shape."""
import atexit
import os
import threading
import weakref

from ps import _ps

# Keyword arguments of init() and the variables they set for this process.
_INIT_VARS = {
    "role": "DMLC_ROLE",
    "num_workers": "DMLC_NUM_WORKER",
    "num_servers": "DMLC_NUM_SERVER",
    "scheduler_host": "DMLC_PS_ROOT_URI",
    "scheduler_port": "DMLC_PS_ROOT_PORT",
    "rank": "DMLC_RANK",
    "group_size": "DMLC_GROUP_SIZE",
    "node_rank": "DMLC_NODE_RANK",
    "instance": "DMLC_INSTANCE_ID",
    "node_host": "DMLC_NODE_HOST",
    "interface": "DMLC_INTERFACE",
    "port": "DMLC_PORT",
    "van": "DMLC_PS_VAN_TYPE",
}

# Objects bound to the job, closed by finalize(): workers and tensors
# (weakly: they go with their last reference) and servers, which serve
# until closed even when the program keeps no reference to them.
_open = weakref.WeakSet()
_servers = set()
_lock = threading.Lock()


def _track(obj, serves=False):
    with _lock:
        (_servers if serves else _open).add(obj)


def _untrack(obj):
    with _lock:
        _servers.discard(obj)
        _open.discard(obj)


def init(do_barrier=True, af=False, **settings):
    """Joins the job as DMLC_ROLE says. Settings come from the DMLC_* / PS_*
    environment; keyword arguments (role, num_workers, num_servers,
    scheduler_host, scheduler_port, rank, group_size, node_rank, instance,
    node_host, interface, port, van)
    set the corresponding DMLC_* variable of this process first. Blocks
    (without the GIL) until every node joined, bounded by
    PS_START_TIMEOUT_MS. af=True starts with the AF app's default, as
    StepMesh: the van's threads busy-poll (unless PS_BUSY_POLL says
    otherwise, or STEPMESH_BUSY_POLL_ENABLE=0)."""
    for key, value in settings.items():
        if key not in _INIT_VARS:
            raise TypeError("init() got an unknown setting %r (known: %s)"
                            % (key, ", ".join(sorted(_INIT_VARS))))
        name = _INIT_VARS[key]
        os.environ[name] = str(value)
    _ps.start(bool(do_barrier), bool(af))


def finalize(do_barrier=True):
    """Closes this process's workers, servers and tensors, then leaves the
    job (with a barrier of every node when do_barrier: it waits for every
    node, or ends when one is declared dead; PS_FINALIZE_TIMEOUT_MS bounds
    it when set). A no-op when not started."""
    with _lock:
        servers, others = list(_servers), list(_open)
        _servers.clear()
        _open.clear()
    # Servers before the postoffice goes; workers after it, when requests
    # still outstanding have failed (ps_kv_worker_destroy would otherwise
    # wait for them up to PS_REQUEST_TIMEOUT_MS).
    for obj in servers:
        obj.close()
    try:
        _ps.finalize(bool(do_barrier))
    finally:
        for obj in others:
            obj.close()


def barrier(group="all", timeout=None):
    """Waits until every node of group ('all', 'workers', 'servers',
    'servers+workers') reached it; timeout in seconds (None: PS_BARRIER_TIMEOUT_MS)."""
    _ps.barrier(group, timeout)


rank = _ps.rank
my_id = _ps.my_id
num_workers = _ps.num_workers
num_servers = _ps.num_servers
group_size = _ps.group_size
instance = _ps.instance
role = _ps.role
van_name = _ps.van_name
is_started = _ps.is_started


def is_worker():
    return role() == "worker"


def is_server():
    return role() == "server"


def is_scheduler():
    return role() == "scheduler"


@atexit.register
def _leave_at_exit():
    # A program that did not finalize leaves without the final barrier, so
    # that its exit is not held up; its peers see it gone.
    if _ps.is_started():
        finalize(do_barrier=False)


def wait_job_end(timeout=None):
    """For servers and the scheduler: waits until every worker called
    finalize() (the job's final barrier; timeout in seconds, None:
    PS_BARRIER_TIMEOUT_MS), then closes this process's servers and leaves.
    Workers call finalize() instead."""
    _ps.barrier("all", timeout)
    finalize(do_barrier=False)
