"""One process of the KV jobs of test_kv.py: DMLC_ROLE says which.

  kv_node.py MODE      MODE: dtypes | zerocopy | errors | gil | device | anysize |
                            recvbuf | slicer | devicestore

The servers run a Python KVServer whose handler keeps each key's last
pushed value (a copy) and answers pulls with it; it checks that a value of
key 100+i arrives as ps.DTYPES[i], sleeps before answering keys
SLOW_KEY..SLOW_KEY+9 and
raises KeyError for a key never pushed; it fails requests of REFUSED_KEY
(raising ps.InvalidArgument) and FAILED_KEY (request.fail(ps.Unsupported)),
which the worker sees as those errors. device: values in device memory of
the kind PS_TEST_DEVICE_KIND (emu by default: the test build of the
package; cuda on a GPU host, where CUDA torch tensors are checked too).
anysize: values of several lengths pushed over both halves of the key
space, pulled back with pull_any (the servers size the values).
recvbuf: the server registers a receive buffer for each worker's key
RECV_KEY + rank (register_recv_buffer) and reports how many pushes landed
in them.
devicestore: the server registers a ps.DeviceArray of the kind for each
worker's key STORE_KEY + rank; the workers push from device memory as IPC
handles (run with PS_DEVICE_IPC=1 over shm), and the handler must find the
values in that array (request.vals a read-only ps.DeviceArray at its
address), copied there by the server.
slicer: the workers give key k to server k % num_servers
(KVWorker.set_slicer), which every server checks of every key it gets;
a slicer that names no server fails the request.
A worker runs MODE's checks, prints
"PASS worker MODE" and leaves; any failed check raises (exit 1).
"""
import sys
import threading
import time

import numpy as np

import ps

SLOW_KEY = 900
SLOW_S = 1.5
REFUSED_KEY = 7000  # the handler raises ps.InvalidArgument
FAILED_KEY = 7001   # the handler answers with request.fail(ps.Unsupported)
DTYPE_KEY = 100
SUM_KEY = 77        # errors: pushed to app 1 (the summation server) by both workers
NP = {"float32": np.float32, "float64": np.float64, "float16": np.float16,
      "bfloat16": np.uint16, "int8": np.int8, "int16": np.int16, "int32": np.int32,
      "int64": np.int64, "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32,
      "uint64": np.uint64, "char": np.uint8}


RECV_KEY = 7100
RECV_FLOATS = 1 << 14
STORE_KEY = 7200


def device_kind():
    import os
    return os.environ.get("PS_TEST_DEVICE_KIND", "emu")


def serve(mode):
    store = {}
    # recvbuf: a buffer per worker for its pushes of RECV_KEY.
    recv = {r: ps.empty(RECV_FLOATS, "float32") for r in range(ps.num_workers())}
    landed = [0, 0]  # pushes of RECV_KEY, those that were in their buffer
    # devicestore: a device buffer per worker for its pushes of STORE_KEY.
    dstore = {}
    if mode == "devicestore":
        dstore = {r: ps.DeviceArray(RECV_FLOATS, "float32", kind=device_kind())
                  for r in range(ps.num_workers())}
    dlanded = [0, 0]
    sliced = [0]  # slicer: keys checked

    def handler(req):
        keys = req.keys
        if mode == "slicer" and SLICER_KEY <= keys[0]:
            for k in keys:
                if k % ps.num_servers() != ps.rank():
                    raise ValueError("server %d got key %d, which the slicer gives to %d" % (
                        ps.rank(), k, k % ps.num_servers()))
            sliced[0] += len(keys)
        if REFUSED_KEY in keys:
            raise ps.InvalidArgument("key %d is refused" % REFUSED_KEY)
        if FAILED_KEY in keys:
            req.fail(ps.Unsupported)
            return None
        if req.push and STORE_KEY <= keys[0] < STORE_KEY + len(dstore):
            dlanded[0] += 1
            v = req.vals
            buf = dstore[keys[0] - STORE_KEY]
            if not (isinstance(v, ps.DeviceArray) and v.readonly and v.nbytes == buf.nbytes):
                raise ValueError("a device store push arrived as %r" % (v,))
            addr = v.__cuda_array_interface__["data"][0]
            dlanded[1] += addr == buf.__cuda_array_interface__["data"][0]
            host = np.zeros(RECV_FLOATS, np.float32)
            v.download(host)
            store[keys[0]] = ("float32", host)
            return None
        if req.push and RECV_KEY <= keys[0] < RECV_KEY + len(recv):
            landed[0] += 1
            rank = (req.sender - 9) // 2  # worker ids are 9, 11, ...
            arr = np.frombuffer(req.vals, dtype=np.uint8)
            landed[1] += arr.size and arr.ctypes.data == recv[rank].ctypes.data
        if req.push:
            vals = np.frombuffer(req.vals, dtype=NP[req.dtype]).copy()
            for k in keys:
                if DTYPE_KEY <= k < DTYPE_KEY + len(ps.DTYPES):
                    want = ps.DTYPES[k - DTYPE_KEY]
                    if req.dtype != want:
                        raise ValueError("key %d arrived as %s, pushed as %s" % (k, req.dtype, want))
            lens = req.lens or [len(vals) // len(keys)] * len(keys)
            off = 0
            for k, n in zip(keys, lens):
                store[k] = (req.dtype, vals[off:off + n])
                off += n
        if req.pull:
            if any(SLOW_KEY <= k < SLOW_KEY + 10 for k in keys):
                time.sleep(SLOW_S)
            parts = [store[k] for k in keys]  # KeyError for a key never pushed
            req.respond(np.concatenate([p[1] for p in parts]), [len(p[1]) for p in parts],
                        parts[0][0])

    server = ps.KVServer(handler)
    if mode == "recvbuf":
        for rank, buf in recv.items():
            server.register_recv_buffer(rank, RECV_KEY + rank, buf)
        try:
            server.register_recv_buffer(0, RECV_KEY, recv[0])
            raise AssertionError("a second buffer for one rank and key was taken")
        except ps.Error:
            pass
        ps.barrier("servers+workers", timeout=30)
    if mode == "devicestore":
        for rank, buf in dstore.items():
            server.register_recv_buffer(rank, STORE_KEY + rank, buf)
        ps.barrier("servers+workers", timeout=30)
    # KV app 1 of the same process: the summation server, answered on the
    # van's thread while the Python handler of app 0 may be sleeping.
    ps.SumServer(app_id=1)
    ps.wait_job_end(timeout=120)
    print("server handled %d requests, %d handler errors" % (server.handled, server.errors))
    if mode == "recvbuf":
        print("recv buffer: %d of %d pushes landed in their registered buffer" % (
            landed[1], landed[0]))
    if mode == "slicer":
        print("slicer: %d keys, each on its server" % sliced[0])
    if mode == "devicestore":
        print("device store: %d of %d pushes landed in their registered device buffer" % (
            dlanded[1], dlanded[0]))


def sample(dtype, n, seed):
    rng = np.random.default_rng(seed)
    if dtype in ("float32", "float64", "float16"):
        return rng.standard_normal(n).astype(NP[dtype])
    info = np.iinfo(NP[dtype])
    return rng.integers(info.min, info.max, size=n, dtype=NP[dtype], endpoint=True)


def check_dtypes(w):
    base = 1000 * (ps.rank() + 1)
    for i, dtype in enumerate(ps.DTYPES):
        key = DTYPE_KEY + i
        a = sample(dtype, 1000 + i, seed=i)
        if ps.rank() == 0:  # one writer per key; the others read after a barrier
            w.push(key, a, dtype=dtype).wait(timeout=30)
        ps.barrier("workers")
        out = np.empty_like(a)
        got = w.pull(key, out, dtype=dtype).wait(timeout=30)
        assert got is out, "pull's wait() returns the destination itself"
        assert np.array_equal(out, a), "round trip of %s changed the values" % dtype
        # Several keys in one request, with per-key lengths.
        b = sample(dtype, 30, seed=100 + i)
        keys = [base + 10 * i + j for j in range(3)]
        lens = [5, 15, 10]
        w.push(keys, b, lens=lens, dtype=dtype).wait(timeout=30)
        out = np.zeros_like(b)
        w.pull(keys, out, lens=lens, dtype=dtype).wait(timeout=30)
        assert np.array_equal(out, b), "multi-key round trip of %s" % dtype
        # push_pull answers with the value just pushed.
        c = sample(dtype, 64, seed=200 + i)
        out = np.zeros_like(c)
        w.push_pull(base + 500 + i, c, out, dtype=dtype).wait(timeout=30)
        assert np.array_equal(out, c), "push_pull of %s" % dtype
        print("dtype %s ok" % dtype)
    # The benchmarks' C reference: round trips made by the C API in a loop.
    c = sample("float32", 64, seed=300)
    out = np.zeros_like(c)
    times = w._c_round_trips(base + 600, c, out, 5)
    assert len(times) == 5 and all(t > 0 for t in times), times
    assert np.array_equal(out, c), "C round trips"
    expect(ValueError, "one key", lambda: w._c_round_trips([1, 2], c, out, 1))
    expect(ValueError, "one size", lambda: w._c_round_trips(base + 600, c, out[:8], 1))
    print("C round trips ok")
    # bytes and memoryview, raw.
    w.push(base + 900, b"hello, ps!!!").wait(timeout=30)
    dst = bytearray(12)
    w.pull(base + 900, memoryview(dst)).wait(timeout=30)
    assert bytes(dst) == b"hello, ps!!!", dst
    print("bytes ok")
    # torch CPU tensors, when torch is installed.
    try:
        import torch
    except ImportError:
        print("torch not installed: tensor round trip not run")
        return
    for j, dt in enumerate((torch.float32, torch.bfloat16, torch.int64, torch.float64)):
        t = (torch.arange(257, dtype=torch.float64) * 1.5 - 100).to(dt)
        w.push(base + 950 + j, t).wait(timeout=30)
        out = torch.zeros_like(t)
        got = w.pull(base + 950 + j, out).wait(timeout=30)
        assert got is out and torch.equal(out, t), "torch %s round trip" % dt
    print("torch tensors ok")


def check_zerocopy(w):
    key = 2000 + ps.rank()
    a = np.arange(1 << 16, dtype=np.float32)
    w.push(key, a).wait(timeout=30)
    a[:] = -1.0  # a local change: the server must not see it
    out = np.zeros_like(a)
    before = w.stats()
    got = w.pull(key, out).wait(timeout=30)
    after = w.stats()
    assert got is out
    assert np.array_equal(out, np.arange(1 << 16, dtype=np.float32)), \
        "the server saw a change made outside ps"
    # tcp and shm receive a pull's values at the destination's own address
    # (the van asked for it by the request): no copy on arrival.
    in_place = after["pull_bytes_in_place"] - before["pull_bytes_in_place"]
    assert in_place == out.nbytes, "the van wrote %d of %d bytes at out's address" % (
        in_place, out.nbytes)
    print("pull landed in place: %d bytes, copied once on arrival: %d" % (
        after["pull_bytes_in_place"] - before["pull_bytes_in_place"],
        after["pull_bytes_copied"] - before["pull_bytes_copied"]))
    w.push(key, a).wait(timeout=30)  # now through ps
    w.pull(key, out).wait(timeout=30)
    assert np.all(out == -1.0), "the change pushed through ps did not arrive"
    # A buffer given to ps stays alive while the request runs, even when the
    # caller drops it.
    b = np.full(1 << 16, 7, dtype=np.int32)
    h = w.push(key + 10, b)
    del b
    h.wait(timeout=30)
    out = np.zeros(1 << 16, dtype=np.int32)
    w.pull(key + 10, out).wait(timeout=30)
    assert np.all(out == 7)
    print("zero-copy ok")


def expect(exc_type, words, fn):
    try:
        fn()
    except exc_type as exc:
        assert words in str(exc), "%r lacks %r" % (str(exc), words)
        print("raised %s: %s" % (type(exc).__name__, exc))
        return exc
    raise AssertionError("expected %s (%s)" % (exc_type.__name__, words))


def check_errors(w):
    key = 3000 + 100 * ps.rank()
    a = np.ones(64, dtype=np.float32)
    expect(ValueError, "dtype", lambda: w.push_pull(key, a, np.zeros(64, np.float64)))
    expect(ValueError, "C-contiguous", lambda: w.push(key, np.ones(128, np.float32)[::2]))
    expect(ValueError, "exactly as large", lambda: w.push_pull(key, a, np.zeros(32, np.float32)))
    expect(ValueError, "read-only", lambda: w.pull(key, b"\0" * 256))
    expect(ValueError, "lens", lambda: w.push([key, key + 1], a, lens=[10, 10]))
    expect(ValueError, "sorted", lambda: w.push([key + 1, key], a))
    expect(ValueError, "format", lambda: w.push(key, np.ones(8, dtype=bool)))
    expect(ValueError, "split evenly", lambda: w.push([key, key + 1, key + 2], a))
    expect(TypeError, "buffer protocol", lambda: w.push(key, [1.0, 2.0]))
    # A pull into a destination of another dtype (the same bytes) or too
    # small for the values the server holds: refused by the server's
    # respond (both named on its stderr), a ValueError naming out here.
    w.push(key + 60, a).wait(timeout=30)
    for out, words in ((np.full(32, 5.0, np.float64), "out (float64, 256 bytes)"),
                       (np.full(32, 5.0, np.float32), "out (float32, 128 bytes)")):
        exc = expect(ValueError, words, lambda: w.pull(key + 60, out).wait(30))
        assert "byte count or dtype" in str(exc), exc
        assert np.all(out == 5.0), "a refused pull wrote into its destination"
    expect(ValueError, "not int32", lambda: w.pull_any(key + 60, "int32").wait(30))
    # The same from a server in C (app 1: the summation server, whose round
    # both workers push): the worker's own check of the answer's size.
    sums = ps.KVWorker(app_id=1)
    sums.push(SUM_KEY, np.ones(16, np.float32)).wait(timeout=30)
    expect(ValueError, "out (float32, 32 bytes)",
           lambda: sums.pull(SUM_KEY, np.zeros(8, np.float32)).wait(30))
    # As many bytes, of another dtype than the server's float32 sums: the
    # worker refuses them (ps/app checks the answer's data type). A round
    # answers each worker's pull once: the next round first.
    sums.push(SUM_KEY, np.ones(16, np.float32)).wait(timeout=30)
    other = np.full(8, 5.0, np.float64)
    expect(ValueError, "out (float64, 64 bytes)", lambda: sums.pull(SUM_KEY, other).wait(30))
    assert np.all(other == 5.0), "sums of another dtype were written into the destination"
    # A key never pushed: the server's handler raises, the pull fails.
    exc = expect(ps.NotFound, "pull", lambda: w.pull(key + 55, np.zeros(4, np.float32)).wait(30))
    assert isinstance(exc, ps.CallError) and isinstance(exc, ps.Error)
    assert exc.name == "PS_ERR_NOT_FOUND" and exc.status == -3, (exc.name, exc.status)
    # A handler's ps error reaches the worker as that error, push and pull.
    expect(ps.InvalidArgument, "push", lambda: w.push(REFUSED_KEY, a).wait(30))
    out = np.full(64, 7.0, np.float32)
    expect(ps.InvalidArgument, "pull", lambda: w.pull(REFUSED_KEY, out).wait(30))
    assert np.all(out == 7.0), "a failed pull wrote into its destination"
    expect(ps.Unsupported, "push", lambda: w.push(FAILED_KEY, a).wait(30))
    # The server lives on.
    w.push(key, a).wait(timeout=30)
    out = np.zeros_like(a)
    w.pull(key, out).wait(timeout=30)
    assert np.array_equal(out, a), "the server stopped answering after a handler error"
    # A wait that times out leaves the request running.
    w.push(SLOW_KEY + ps.rank(), a).wait(timeout=30)
    h = w.pull(SLOW_KEY + ps.rank(), np.zeros_like(a))
    exc = expect(ps.TimedOut, "pull", lambda: h.wait(timeout=0.2))
    assert isinstance(exc, ps.TimeError)
    h.wait(timeout=30)
    print("errors ok")


def check_gil(w):
    a = np.ones(16, dtype=np.float32)
    w.push(SLOW_KEY, a).wait(timeout=30)
    ps.barrier("workers")
    count = [0]
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            count[0] += 1

    t = threading.Thread(target=spin)
    t.start()
    time.sleep(0.05)
    h = w.pull(SLOW_KEY, np.zeros_like(a))
    c0 = count[0]
    t0 = time.monotonic()
    h.wait(timeout=30)
    waited = time.monotonic() - t0
    c1 = count[0]
    stop.set()
    t.join()
    # While this thread waited (the server sleeps SLOW_S s), the other one
    # ran: a wait holding the GIL would leave it at most one switch.
    assert waited > SLOW_S / 2, "the slow pull returned after %.3f s" % waited
    assert c1 - c0 > 10000, "another thread made %d steps during a %.2f s wait" % (c1 - c0, waited)
    print("gil ok: %d steps in %.2f s of wait" % (c1 - c0, waited))
    # A slow Python handler does not hold up the server's van: while it
    # sleeps on a pull, the same server process answers app 1 (its
    # summation server) at once.
    sums = ps.KVWorker(app_id=1)
    h = w.pull(SLOW_KEY, np.zeros_like(a))
    time.sleep(0.1)  # the handler is asleep now
    t0 = time.monotonic()
    got = sums.push_pull(7, np.arange(8, dtype=np.float32), np.zeros(8, np.float32)).wait(10)
    took = time.monotonic() - t0
    assert np.array_equal(got, np.arange(8, dtype=np.float32)), got
    assert not h.done() and took < SLOW_S / 3, \
        "app 1 answered after %.3f s while app 0's handler slept" % took
    h.wait(timeout=30)
    print("van not held up by the handler: app 1 answered in %.4f s" % took)


def check_anysize(w):
    base = 6000 + 100 * ps.rank()
    # Keys on both servers' halves of the key space (when there are two).
    keys = [base, base + 1, base + 2, (1 << 63) + base, (1 << 63) + base + 1]
    lens = [3, 1, 7, 5, 2]
    a = np.arange(sum(lens), dtype=np.float32) + base
    w.push(keys, a, lens=lens).wait(timeout=30)
    vals, got_lens = w.pull_any(keys, "float32").wait(timeout=30)
    assert got_lens == lens, got_lens
    got = np.asarray(vals)
    assert got.dtype == np.float32 and np.array_equal(got, a), got
    vals, got_lens = w.pull_any([base + 2], dtype="float32").wait(timeout=30)
    assert got_lens == [7] and np.array_equal(np.asarray(vals), a[4:11])
    vals, got_lens = w.pull_any([]).wait(timeout=30)
    assert got_lens == [] and len(vals) == 0
    print("pull_any ok")


def check_recvbuf(w):
    ps.barrier("servers+workers", timeout=30)  # the servers registered their buffers
    for i in range(3):
        a = np.full(RECV_FLOATS, float(ps.rank() * 10 + i), dtype=np.float32)
        w.push(RECV_KEY + ps.rank(), a).wait(timeout=30)
        out = np.zeros_like(a)
        w.pull(RECV_KEY + ps.rank(), out).wait(timeout=30)
        assert np.array_equal(out, a), "the value pushed into a registered buffer"
    print("recvbuf pushes ok")


def check_devicestore(w):
    ps.barrier("servers+workers", timeout=30)  # the server registered its buffers
    kind = device_kind()
    for i in range(3):
        a = np.arange(RECV_FLOATS, dtype=np.float32) + float(ps.rank() * 100 + i)
        before = w.stats()["push_bytes_ipc"]
        # A temporary: the worker keeps it until the server copied it out.
        w.push(STORE_KEY + ps.rank(), device_array(a, kind)).wait(timeout=30)
        sent = w.stats()["push_bytes_ipc"] - before
        assert sent == a.nbytes, "%d bytes pushed as an IPC handle, expected %d" % (sent, a.nbytes)
        out = np.zeros_like(a)
        w.pull(STORE_KEY + ps.rank(), out).wait(timeout=30)
        assert np.array_equal(out, a), "the value the device store received"
    print("device store pushes ok")


SLICER_KEY = 8000


def check_slicer(w):
    calls = []

    def interleave(keys, num_servers):
        calls.append(len(keys))
        return [k % num_servers for k in keys]

    w.set_slicer(interleave)
    base = SLICER_KEY + 100 * ps.rank()
    keys = list(range(base, base + 6))
    lens = [1, 2, 3, 4, 5, 6]
    a = np.arange(sum(lens), dtype=np.float32) + base
    w.push(keys, a, lens=lens).wait(timeout=30)
    out = np.zeros_like(a)
    w.pull(keys, out, lens=lens).wait(timeout=30)
    assert np.array_equal(out, a), out
    assert calls == [6, 6], calls
    w.set_slicer(lambda keys, n: [n] * len(keys))  # no such server
    expect(ps.InvalidArgument, "", lambda: w.push(keys, a, lens=lens).wait(timeout=30))
    w.set_slicer(None)  # the key ranges again (keys the servers do not check)
    w.push([k - SLICER_KEY // 2 for k in keys], a, lens=lens).wait(timeout=30)
    print("slicer ok")


class HostInterface:
    """Host memory that claims to be device memory: ps must refuse it."""

    def __init__(self, arr):
        self.arr = arr
        self.__cuda_array_interface__ = {"shape": arr.shape, "typestr": arr.dtype.str,
                                         "data": (arr.ctypes.data, False), "version": 3}


def device_array(a, kind):
    d = ps.DeviceArray(a.shape, str(a.dtype), kind=kind)
    d.upload(a)
    return d


def downloaded(d, like):
    out = np.empty_like(like)
    d.download(out)
    return out


def check_device_sum(kind):
    """The summation server (app 1) over device memory, as ps.torch sums a
    CUDA tensor: a tensor of three parts summed in place over every worker,
    then one written on a stream of its own (CUDA) named by stream=."""
    from ps import _ps
    sums = ps.KVWorker(app_id=1)
    n = 3000  # 12000 bytes: parts of 4096, 4096, 3808
    a = np.arange(n, dtype=np.float32) * (ps.rank() + 1)
    da = device_array(a, kind)
    t = _ps.SumTensor(sums, 0, "float32", a.nbytes, 4096)
    assert t.num_parts == 3, t.num_parts
    t.start(da)
    t.wait(30)
    total = sum(r + 1 for r in range(ps.num_workers()))
    want = np.arange(n, dtype=np.float32) * total
    assert np.array_equal(downloaded(da, a), want), "device memory summed in place"
    if kind != "cuda":
        expect(ValueError, "CUDA source only", lambda: t.start(da, stream=0))
    else:
        import torch
        x = torch.arange(n, device="cuda", dtype=torch.float32)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())  # x's arange first
        with torch.cuda.stream(s):
            torch.cuda._sleep(50_000_000)  # the value is written late on s
            x.mul_(ps.rank() + 1)
        t.start(x, stream=s.cuda_stream)
        t.wait(30)
        assert torch.equal(x.cpu(), torch.arange(n, dtype=torch.float32) * total), \
            "a CUDA tensor summed after its stream's work"
    t.close()
    sums.close()
    print("device (%s) sum ok" % kind)


def check_device(w):
    kind = device_kind()
    key = 3000 + 10 * ps.rank()
    n = 1 << 16
    a = np.arange(n, dtype=np.float32) * (ps.rank() + 1)
    da = device_array(a, kind)
    before = w.stats()
    w.push([key, key + 1], da).wait(timeout=30)  # device -> server
    staged = w.stats()["push_bytes_staged"] - before["push_bytes_staged"]
    assert staged == a.nbytes, "%d bytes pushed from device memory, expected %d" % (
        staged, a.nbytes)
    host = np.zeros_like(a)
    w.pull([key, key + 1], host).wait(timeout=30)  # gpu2cpu: what the device held
    assert np.array_equal(host, a), "device push arrived changed"
    dout = device_array(np.zeros_like(a), kind)
    before = w.stats()
    got = w.pull([key, key + 1], dout).wait(timeout=30)  # server -> device
    assert got is dout and np.array_equal(downloaded(dout, a), a), "pull into device memory"
    staged = w.stats()["pull_bytes_staged"] - before["pull_bytes_staged"]
    assert staged == a.nbytes, "%d bytes pulled through page-locked staging, expected %d" % (
        staged, a.nbytes)
    b = np.full(n, 3.5, dtype=np.float32)
    w.push_pull(key + 2, device_array(b, kind), dout).wait(timeout=30)
    assert np.array_equal(downloaded(dout, a), b), "device push_pull"
    # bfloat16 as uint16 bits, named by dtype.
    bits = (np.arange(512, dtype=np.uint16) * 7) & 0x7f7f
    dbits = device_array(bits, kind)
    w.push(key + 3, dbits, dtype="bfloat16").wait(timeout=30)
    dback = device_array(np.zeros_like(bits), kind)
    w.pull(key + 3, dback, dtype="bfloat16").wait(timeout=30)
    assert np.array_equal(downloaded(dback, bits), bits), "bfloat16 device round trip"
    try:
        w.push(key + 4, HostInterface(np.zeros(8, np.float32)))
        raise AssertionError("host memory behind __cuda_array_interface__ was taken")
    except ValueError as e:
        assert "not device memory" in str(e), e
    print("device (%s) round trips ok" % kind)
    check_device_sum(kind)
    if kind != "cuda":
        return
    import torch
    t = torch.arange(4096, device="cuda", dtype=torch.float32) * (ps.rank() + 2)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):  # written on a stream of its own: ps waits for it
        u = t * 2
        w.push(key + 5, u).wait(timeout=30)
    out = torch.zeros_like(u)
    w.pull(key + 5, out).wait(timeout=30)
    assert torch.equal(out, t * 2), "CUDA tensor round trip"
    bf = (torch.arange(300, device="cuda") * 0.25).to(torch.bfloat16)
    w.push(key + 6, bf).wait(timeout=30)
    bout = torch.zeros_like(bf)
    w.pull(key + 6, bout).wait(timeout=30)
    assert torch.equal(bout, bf), "CUDA bfloat16 tensor round trip"
    print("CUDA tensors ok")


def main():
    mode = sys.argv[1]
    ps.init()
    if ps.is_scheduler():
        ps.wait_job_end(timeout=120)
        return
    if ps.is_server():
        serve(mode)
        return
    w = ps.KVWorker()
    {"dtypes": check_dtypes, "zerocopy": check_zerocopy, "errors": check_errors,
     "gil": check_gil, "device": check_device, "anysize": check_anysize,
     "recvbuf": check_recvbuf, "slicer": check_slicer,
     "devicestore": check_devicestore}[mode](w)
    print("PASS worker %s" % mode)
    ps.finalize()


if __name__ == "__main__":
    main()
