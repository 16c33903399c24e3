"""The CUDA path's logic without a GPU: which libspclient calls a CUDA
tensor leads to, with which arguments, and what is refused.

A "CUDA tensor" here is a CPU tensor whose .device says cuda:N (a tensor
subclass), and the device entry points of libspclient are replaced by
recorders over host memory: no CUDA, no daemon. What this cannot show
(real device memory, IPC, streams) is the GPU suite's (test_cuda_*.py)."""
import ctypes
import gc
import threading

import pytest
import torch

import spcoll
from spcoll import _cuda, _lib, ops
from spcoll._dist_coll import Coll
from spcoll.memory import Pool

lib = _lib.lib


class FakeCuda(torch.Tensor):
    """A CPU tensor that says it is on a GPU (torch's default
    __torch_function__ keeps the subclass through views and copies)."""
    _dev = 0

    @property
    def device(self):
        return torch.device("cuda", self._dev)

    @property
    def is_cuda(self):
        return True


def cuda(t, dev=0):
    f = torch.Tensor._make_subclass(FakeCuda, t)
    f._dev = dev
    return f


class FakeStream:
    def __init__(self, handle):
        self.cuda_stream = handle


class Recorder:
    """libspclient's device calls, recorded; device memory is host memory
    (kept alive here) and a buffer handle is an index into it."""

    def __init__(self):
        self.calls = []
        self.bufs = {}              # handle -> (ctypes array, device)
        self.next = 0x1000

    def log(self, name, *args):
        self.calls.append((name,) + args)

    def names(self):
        return [c[0] for c in self.calls]

    # -- memory --
    def spc_buffer_alloc_device(self, client, device, size, buf_p):
        arr = (ctypes.c_uint8 * size)()
        h = self.next
        self.next += 0x10
        self.bufs[h] = (arr, device)
        buf_p._obj.value = h
        self.log("spc_buffer_alloc_device", device, size)
        return 0

    def spc_buffer_register_device(self, *a):
        self.log("spc_buffer_register_device")
        return -1

    def spc_buffer_data(self, h):
        return ctypes.addressof(self.bufs[h][0])

    def spc_buffer_free(self, h):
        self.log("spc_buffer_free", self.bufs[h][1])
        del self.bufs[h]
        return 0

    def spc_tensor_init(self, ct, buf, off, dt, nd, shape):
        self.log("spc_tensor_init", buf, off, dt, [shape[i] for i in range(nd)])
        ct._obj.buf = buf
        ct._obj.offset = off
        ct._obj.dtype = dt
        ct._obj.ndim = nd
        for i in range(nd):
            ct._obj.shape[i] = shape[i]
        return 0

    # -- ops --
    def spc_out_shape(self, g, op, cin, shape, nd):
        src = cin._obj
        n = 1
        for i in range(src.ndim):
            n *= src.shape[i]
        shape[0] = n
        nd._obj.value = 1
        return 0

    def spc_run(self, g, op, cin, cout):
        self.log("spc_run", cin._obj.buf, cout._obj.buf)
        return 0

    def spc_run_on_stream(self, g, op, cin, cout, stream):
        self.log("spc_run_on_stream", cin._obj.buf, cout._obj.buf,
                 stream.value)
        return 0

    def spc_start_on_stream(self, g, op, cin, cout, stream, req):
        self.log("spc_start_on_stream", cin._obj.buf, cout._obj.buf,
                 stream.value)
        req._obj.value = 0x77
        return 0

    def spc_start(self, g, op, cin, cout, req):
        self.log("spc_start", cin._obj.buf, cout._obj.buf)
        req._obj.value = 0x78
        return 0

    def spc_wait_on_stream(self, req, stream):
        self.log("spc_wait_on_stream", req._obj.value, stream.value)
        req._obj.value = None
        return 0

    def spc_test(self, req, done):
        self.log("spc_test", req._obj.value)
        done._obj.value = 1
        req._obj.value = None
        return 0


class FakeClient:
    def __init__(self):
        self._lock = threading.RLock()
        self._h = 0x42
        self.pool = Pool(self, arena_bytes=4 << 20)

    def _handle(self):
        return self._h

    def _raise(self, rc, call):
        raise RuntimeError("fake client: %s failed with %d" % (call, rc))


class FakeGroup(spcoll.Group):
    def __init__(self, client, size=2, rank=0):
        self.client, self.size, self.rank = client, size, rank
        self._h, self.name = 0x99, "fake"

    def _handle(self):
        return 0x99


@pytest.fixture
def rec(monkeypatch):
    r = Recorder()
    for name in ("spc_buffer_alloc_device", "spc_buffer_register_device",
                 "spc_buffer_data", "spc_buffer_free", "spc_tensor_init",
                 "spc_out_shape", "spc_run", "spc_run_on_stream",
                 "spc_start_on_stream", "spc_start", "spc_wait_on_stream",
                 "spc_test"):
        monkeypatch.setattr(lib, name, getattr(r, name))
    streams = {}

    def current_stream(dev):
        if dev < 0:
            return None
        return streams.setdefault(dev, FakeStream(0x5000 + dev))

    def device_tensor(view, dev, dtype, shape):
        ptr, _ = view.__cuda_array_interface__["data"]
        nbytes = view.__cuda_array_interface__["shape"][0]
        arr = (ctypes.c_uint8 * nbytes).from_address(ptr)
        # the array holds the view as torch's storage holds it for real
        arr._spcoll_view = view
        t = torch.frombuffer(arr, dtype=torch.uint8).view(dtype).view(shape)
        return cuda(t, dev)

    entered = []

    class Ctx:
        def __init__(self, s):
            self.s = s

        def __enter__(self):
            entered.append(self.s.cuda_stream)

        def __exit__(self, *a):
            return False

    monkeypatch.setattr(_cuda, "current_stream", current_stream)
    monkeypatch.setattr(_cuda, "device_tensor", device_tensor)
    monkeypatch.setattr(_cuda, "stream_context", Ctx)
    r.entered = entered
    return r


# ---- where an op runs ------------------------------------------------------

def test_place_host_device_and_refusals():
    h = torch.zeros(2)
    d0, d1 = cuda(torch.zeros(2), 0), cuda(torch.zeros(2), 1)
    assert _cuda.place([h, h], "x") == -1
    assert _cuda.place([d0, d0], "x") == 0
    assert _cuda.place([], "x") == -1
    with pytest.raises(ValueError, match="mix host and device tensors "
                       r"\(cpu, cuda:0\)"):
        _cuda.place([h, d0], "all_reduce's tensors")
    with pytest.raises(ValueError, match=r"different GPUs \(cuda:0, cuda:1\)"):
        _cuda.place([d0, d1], "x")
    with pytest.raises(ValueError, match="only CPU and CUDA"):
        _cuda.place([torch.empty(1, device="meta")], "x")


def test_device_index():
    assert _cuda.device_index(None) == -1
    assert _cuda.device_index("cpu") == -1
    assert _cuda.device_index("cuda:3") == 3
    assert _cuda.device_index(torch.device("cuda", 1)) == 1
    with pytest.raises(ValueError, match="only 'cpu' and 'cuda'"):
        _cuda.device_index("meta")


# ---- memory ------------------------------------------------------------------

def test_device_empty_allocates_a_device_arena_never_registers(rec):
    c = FakeClient()
    t = c.pool.empty([4, 3], torch.float32, 1)
    assert t.device == torch.device("cuda", 1)
    assert rec.calls == [("spc_buffer_alloc_device", 1, 4 << 20)]
    u = c.pool.empty([5], torch.int64, 1)     # same arena: no new buffer
    assert rec.names() == ["spc_buffer_alloc_device"]
    assert c.pool.locate(u)[0] is c.pool.locate(t)[0]
    # a host tensor at no device arena; a device tensor of another GPU
    # does not sit in GPU 1's arena even at the same address
    assert c.pool.locate(torch.zeros(3)) is None
    assert c.pool.locate(cuda(t.view(torch.float32).as_subclass(torch.Tensor),
                              0)) is None
    assert "spc_buffer_register_device" not in rec.names()


def test_device_blocks_return_when_torch_frees_them(rec):
    c = FakeClient()
    t = c.pool.empty([100], torch.float32, 0)
    assert c.pool.live_blocks() == 1
    del t
    gc.collect()
    assert c.pool.live_blocks() == 0
    c.pool.trim()                  # empty arenas go back: freed by spcoll
    assert rec.calls[-1] == ("spc_buffer_free", 0)


def test_foreign_cuda_tensor_is_staged_not_registered(rec):
    """A tensor from torch's caching allocator is copied into spcoll's
    device memory, never imported: torch may cudaFree its segment
    (empty_cache) whenever it likes."""
    c = FakeClient()
    x = cuda(torch.arange(6, dtype=torch.float32), 0)
    ct, keep = c.pool.describe(x, "input")
    assert keep is not x and keep.device == x.device
    assert torch.equal(keep.as_subclass(torch.Tensor),
                       torch.arange(6, dtype=torch.float32))
    assert c.pool.staged_count == 1 and c.pool.staged_bytes == 24
    assert rec.names() == ["spc_buffer_alloc_device", "spc_tensor_init"]
    assert rec.calls[1][3:] == (_lib.FLOAT32, [6])
    # the same tensor, now in spcoll memory: zero copy
    ct2, keep2 = c.pool.describe(keep, "input")
    assert keep2 is keep and c.pool.staged_count == 1


def test_expandable_segments_need_nothing(rec, monkeypatch):
    """Expandable segments are VMM memory that CUDA IPC cannot share; they
    are fine here because torch's memory is only ever copied from."""
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    c = FakeClient()
    c.pool.describe(cuda(torch.ones(3)), "input")
    assert "spc_buffer_register_device" not in rec.names()


def test_empty_device_tensor_uses_an_arena_of_its_gpu(rec):
    c = FakeClient()
    c.pool.empty([8], torch.float32, -1 + 1)    # a device arena on GPU 0
    rec.calls.clear()
    ct, keep = c.pool.describe(cuda(torch.zeros(0), 0), "input")
    assert rec.names() == ["spc_tensor_init"]
    dev_bufs = [h for h, (_, d) in rec.bufs.items() if d == 0]
    assert rec.calls[0][1] in dev_bufs


# ---- ops: which C calls, with which stream ---------------------------------

def _group():
    c = FakeClient()
    return FakeGroup(c)


def test_op_on_cuda_runs_on_the_current_stream(rec):
    g = _group()
    x = cuda(torch.arange(4, dtype=torch.float32), 0)
    y = ops.all_reduce(x, g)
    assert y.device == torch.device("cuda", 0)
    runs = [c for c in rec.calls if c[0].startswith("spc_run")]
    assert len(runs) == 1 and runs[0][0] == "spc_run_on_stream"
    assert runs[0][3] == 0x5000
    # both tensors in device arenas of GPU 0
    dev_bufs = {h for h, (_, d) in rec.bufs.items() if d == 0}
    assert runs[0][1] in dev_bufs and runs[0][2] in dev_bufs


def test_op_on_host_keeps_the_host_path(rec):
    g = _group()
    # host memory of the fake client comes from spc_buffer_alloc: real C,
    # so describe a host tensor without an arena call: use host staging
    # through a patched host allocation
    calls = []

    def alloc(client, size, buf_p):
        arr = (ctypes.c_uint8 * size)()
        h = rec.next
        rec.next += 0x10
        rec.bufs[h] = (arr, -1)
        buf_p._obj.value = h
        calls.append(size)
        return 0
    lib_alloc = lib.spc_buffer_alloc
    lib.spc_buffer_alloc = alloc
    try:
        ops.all_reduce(torch.ones(4), g)
    finally:
        lib.spc_buffer_alloc = lib_alloc
    assert calls and "spc_run" in rec.names()
    assert "spc_run_on_stream" not in rec.names()
    assert "spc_buffer_alloc_device" not in rec.names()


def test_async_op_on_cuda_starts_and_waits_on_the_stream(rec):
    g = _group()
    x = cuda(torch.ones(3), 0)
    h = ops.all_gather(x, g, dim=0, async_op=True)
    start = [c for c in rec.calls if c[0].startswith("spc_start")]
    assert start == [("spc_start_on_stream", start[0][1], start[0][2], 0x5000)]
    h.wait()
    assert rec.calls[-1] == ("spc_wait_on_stream", 0x77, 0x5000)
    assert "spc_test" not in rec.names()


# ---- the torch backend's collectives ----------------------------------------

def test_backend_coll_device_path_and_mixed_refusal(rec):
    g = _group()
    coll = Coll(g)
    t = cuda(torch.arange(5, dtype=torch.float32), 0)
    assert coll.use([[t]]) == 0
    call = coll.reduce("all_reduce", t, "sum")
    assert call.stream.cuda_stream == 0x5000
    assert rec.calls[-1][0] == "spc_start_on_stream"
    ran = []
    call.finish = lambda: ran.append(1)
    call.wait(10.0)
    assert rec.calls[-1] == ("spc_wait_on_stream", 0x77, 0x5000)
    # finish (the copy back) ran with the op's stream current
    assert ran == [1] and rec.entered == [0x5000]
    with pytest.raises(ValueError, match="mix host and device"):
        coll.use([[t], [torch.zeros(5)]])
    coll.use([[t]])
    with pytest.raises(ValueError, match="output is on cpu, its other "
                       "tensors on cuda:0"):
        coll.flat_out(torch.zeros(5))


def test_backend_coll_poll_completes_device_call(rec):
    g = _group()
    coll = Coll(g)
    t = cuda(torch.ones(2), 0)
    coll.use([t])
    call = coll.reduce("all_reduce", t, "max")
    assert call.poll()
    assert rec.calls[-1] == ("spc_test", 0x77)
    assert call.state == "ok" and rec.entered == [0x5000]


def test_backend_registered_for_cuda():
    import inspect
    import torch.distributed as dist
    if "devices" not in inspect.signature(
            dist.Backend.register_backend).parameters:
        pytest.skip("torch %s registers backends without devices"
                    % torch.__version__)
    assert "SPCOLL" in dist.Backend._plugins
    assert set(dist.Backend.backend_capability["spcoll"]) == {"cpu", "cuda"}


def test_gpu_path_available_is_false_without_cuda():
    import cuda_probe
    if cuda_probe.gpus() != 0:
        pytest.skip("a GPU is visible: the GPU suite checks this path")
    # in a child: torch's device count would poison fork in this process
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", "import spcoll; "
                          "print(spcoll.gpu_path_available())"],
                         check=True, capture_output=True, text=True)
    assert out.stdout.split()[-1] == "False"
