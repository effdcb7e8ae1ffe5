"""The KV app from Python: KVWorker, KVServer (a Python handler) and the
summation server."""
import itertools
import sys
import threading
import traceback

from ps import _job, _ps

_customer_ids = {}
_ids_lock = threading.Lock()


def _next_customer_id(app_id):
    with _ids_lock:
        counter = _customer_ids.setdefault(app_id, itertools.count())
        return next(counter)


class KVWorker(_ps.KVWorker):
    """A KV worker: push / pull / push_pull of keys (an int, a sorted
    sequence of ints) and values (numpy arrays, bytes, memoryview, CPU
    torch tensors; CUDA torch tensors and other device memory with
    __cuda_array_interface__), each returning a Handle; handle.wait(timeout)
    blocks without the GIL and returns the destination:
      push(keys, vals, lens=None, cmd=0, dtype=None)
      pull(keys, out, lens=None, cmd=0, dtype=None)
      push_pull(keys, vals, out, lens=None, cmd=0, dtype=None)
    Values are per key vals.nbytes / len(keys) bytes unless lens (elements
    per key) says otherwise. Buffers are used in place: leave them alone
    until the request ended. A pull whose destination does not fit the
    servers' values (another byte count, or another dtype than the one a
    server states for them) raises ValueError in wait()."""

    def __init__(self, app_id=0, customer_id=None):
        if customer_id is None:
            customer_id = _next_customer_id(app_id)
        super().__init__(app_id, customer_id)
        _job._track(self)


class KVServer:
    """Serves KV app app_id with a Python handler: handler(request) runs on
    a thread of its own, with the GIL, one request at a time, never on the
    van's thread. It returns None (a push is acknowledged), the values of a
    pull (any buffer, CPU or CUDA tensor, or device memory with
    __cuda_array_interface__, sent without a copy: do not change them
    afterwards), or (vals, lens); or it answers itself with
    request.respond(...). Values of another dtype than the pull's
    (request.dtype) or of another size than its destination
    (request.val_len) are refused: respond raises ValueError and the
    worker's pull fails with one. The server serves until closed (or ps.finalize()),
    whether or not the program keeps a reference. A handler that raises a
    ps error that names one status (ps.NotFound, ps.InvalidArgument, ...)
    fails the request with it: the worker's wait raises the same class. A
    handler that raises anything else is reported on stderr and counted in
    .errors; its request is answered 'no value' (a pull raises ps.NotFound
    on the worker; a push is acknowledged). request.fail(error) does the
    same from the handler."""

    def __init__(self, handler, app_id=0):
        self._handler = handler
        self._core = _ps.KVServer(app_id)
        self._stop = threading.Event()
        self.errors = 0
        self.handled = 0
        self._thread = threading.Thread(target=self._serve, name="ps-kv-server-%d" % app_id,
                                        daemon=True)
        self._thread.start()
        _job._track(self, serves=True)

    def _serve(self):
        while not self._stop.is_set():
            req = self._core.next(0.2)
            if req is None:
                continue
            try:
                result = self._handler(req)
                if not req.answered:
                    if result is None:
                        req.respond()
                    elif isinstance(result, tuple):
                        req.respond(result[0], result[1])
                    else:
                        req.respond(result)
            except _ps.Error as exc:  # the handler fails the request: the worker gets it
                if not req.answered:
                    self._answer_failed(req, exc)
            except Exception:  # the handler's (or its answer's) fault: report, go on
                self.errors += 1
                sys.stderr.write("ps.KVServer: the handler failed on a %s request of keys %s:\n%s"
                                 % ("pull" if req.pull else "push", list(req.keys),
                                    traceback.format_exc()))
                sys.stderr.flush()
                if not req.answered:
                    self._answer_failed(req, None)
            finally:
                self.handled += 1
                del req

    @staticmethod
    def _answer_failed(req, error):
        try:
            req.fail(error)
        except (_ps.Error, ValueError) as exc:
            sys.stderr.write("ps.KVServer: could not answer: %s\n" % exc)
            if not req.answered:
                req.fail()

    def register_recv_buffer(self, worker_rank, key, buffer):
        """Pushes from worker `worker_rank` whose first key is `key` land in
        `buffer` (a writable buffer or CPU tensor, held by the server) where
        the van receives in place; request.vals is then a view of it. A
        device buffer (ps.DeviceArray, CUDA tensor) takes the pushes sent as
        IPC handles (PS_DEVICE_IPC=1), copied device to device. Every such
        push overwrites it: be done with one before the next (ps-lite's
        RegisterRecvBuffer)."""
        self._core.register_recv_buffer(worker_rank, key, buffer)

    def close(self):
        """Stops the handler thread; requests still queued are answered
        'no value'. Before ps.finalize() (which calls it)."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()
        self._core.close()
        _job._untrack(self)

    @property
    def closed(self):
        return self._core.closed


class SumServer(_ps.SumServer):
    """The summation server (BytePS server semantics: every worker pushes a
    key once per round, every worker pulls the sum) on KV app app_id;
    settings from BYTEPS_* in the environment. It serves until closed (or
    ps.finalize()), whether or not the program keeps a reference."""

    def __init__(self, app_id=0):
        super().__init__(app_id)
        _job._track(self, serves=True)

    def close(self):
        super().close()
        _job._untrack(self)
