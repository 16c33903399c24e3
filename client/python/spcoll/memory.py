"""Torch tensors in memory shared with spcolld.

A client's Pool carves tensors out of a few large spcoll buffers (arenas:
sealed memfds registered with the daemon once), so that making a tensor
costs no system call and no round trip. A tensor made here is zero copy:
the daemon reads it and writes into it where it lies.

Lifetime: each tensor's storage holds a small Python object (a ctypes view
of its arena); when torch frees the storage, that object dies and a
finalizer queues the block for reuse. The finalizer only appends to a
deque, because it may run on any thread and in the middle of anything;
the queue is drained under the client's lock by the next allocation.
Every block keeps its arena, and the arena its client, alive: a client
is never disconnected (which unmaps its buffers) under a live tensor.

CUDA tensors (see _cuda.py for why): device arenas come from
spc_buffer_alloc_device, one per GPU at a time, and hand out blocks the
same way; a block's tensor is made through __cuda_array_interface__ and
its DeviceView carries the finalizer. A CUDA tensor outside them is staged
by a copy on the current stream. A freed block is reused in host order,
which is safe for work on the stream it was used on (the rule of torch's
own caching allocator without record_stream).
"""
import bisect
import collections
import ctypes
import os
import weakref

import torch

from . import _cuda, _lib

ALIGN = 64
_MIB = 1 << 20
_SPC_EUNSUPPORTED = -15


def _arena_default():
    v = os.environ.get("SPCOLL_ARENA_BYTES")
    if v is None:
        return 64 * _MIB
    try:
        n = int(v)
    except ValueError:
        n = 0
    if n < 4096:
        raise ValueError("SPCOLL_ARENA_BYTES=%r: must be an integer of at "
                         "least 4096" % v)
    return n


# torch dtype -> (spc_dtype, element size). bool travels as uint8: the
# copy ops move bytes, and the reducing ops refuse it (see ops.py).
DTYPES = {
    torch.float32: _lib.FLOAT32, torch.float64: _lib.FLOAT64,
    torch.float16: _lib.FLOAT16, torch.bfloat16: _lib.BFLOAT16,
    torch.int8: _lib.INT8, torch.uint8: _lib.UINT8,
    torch.int32: _lib.INT32, torch.int64: _lib.INT64,
    torch.bool: _lib.UINT8,
}


def spc_dtype(dtype, what="tensor"):
    try:
        return DTYPES[dtype]
    except KeyError:
        raise TypeError("spcoll: %s has dtype %s; supported: %s" % (
            what, dtype, ", ".join(str(d) for d in DTYPES))) from None


def check_device(t, what="tensor"):
    """t's place: -1 for the CPU, else its CUDA ordinal (ValueError for any
    other device)."""
    return _cuda.place([t], what)


class _Arena:
    __slots__ = ("pool", "cbuf", "base", "size", "view_cls", "free", "live",
                 "device", "__weakref__")

    def __init__(self, pool, cbuf, size, device=-1):
        self.pool = pool
        self.cbuf = cbuf
        self.base = _lib.lib.spc_buffer_data(cbuf)
        self.size = size
        self.device = device      # -1: host memory; else a CUDA ordinal
        # One ctypes type per host arena: its instances expose exactly the
        # arena to torch.frombuffer and can carry a finalizer.
        self.view_cls = None if device >= 0 else type(
            "spcoll_arena_view", (ctypes.c_uint8 * size,), {})
        self.free = [(0, size)]   # (offset, length), sorted, coalesced
        self.live = 0             # blocks handed out and not yet released

    def take(self, n):
        for i, (off, ln) in enumerate(self.free):
            if ln >= n:
                if ln == n:
                    del self.free[i]
                else:
                    self.free[i] = (off + n, ln - n)
                self.live += 1
                return off
        return None

    def give_back(self, off, n):
        self.live -= 1
        i = bisect.bisect_left(self.free, (off, 0))
        # coalesce with the neighbours
        if i < len(self.free) and off + n == self.free[i][0]:
            n += self.free[i][1]
            del self.free[i]
        if i > 0 and self.free[i - 1][0] + self.free[i - 1][1] == off:
            off, n = self.free[i - 1][0], self.free[i - 1][1] + n
            del self.free[i - 1]
            i -= 1
        self.free.insert(i, (off, n))


def _released(pending, arena, off, n):
    pending.append((arena, off, n))


class Pool:
    """The spcoll memory of one client. Called with the client's lock held
    (everything but the finalizers, which only queue)."""

    def __init__(self, client, arena_bytes=None):
        self._client = client
        self.arena_bytes = arena_bytes or _arena_default()
        self._arenas = []          # sorted by base address
        self._bases = []
        self._pending = collections.deque()
        self.staged_bytes = 0      # bytes copied in because a tensor was
        self.staged_count = 0      # not in spcoll memory (see stage())

    # -- arenas --
    def _new_arena(self, n, device=-1):
        size = max(self.arena_bytes, (n + 2 * _MIB - 1) // (2 * _MIB) * (2 * _MIB))
        cbuf = ctypes.c_void_p()
        h = self._client._handle()
        if device < 0:
            rc = _lib.lib.spc_buffer_alloc(h, size, ctypes.byref(cbuf))
            what = "buffer_alloc(%d bytes)" % size
        else:
            rc = _lib.lib.spc_buffer_alloc_device(h, device, size,
                                                  ctypes.byref(cbuf))
            what = "buffer_alloc_device(cuda:%d, %d bytes)" % (device, size)
            if rc == _SPC_EUNSUPPORTED:
                raise _cuda.unavailable(self._client, rc, what)
        if rc < 0:
            self._client._raise(rc, what)
        a = _Arena(self, cbuf.value, size, device)
        i = bisect.bisect(self._bases, a.base)
        self._bases.insert(i, a.base)
        self._arenas.insert(i, a)
        return a

    def _drain(self):
        while self._pending:
            a, off, n = self._pending.popleft()
            if a.cbuf is None:
                continue
            a.give_back(off, n)
            # A dedicated oversized arena goes back as soon as it is empty;
            # regular ones are kept for reuse (trim() returns them).
            if a.live == 0 and a.size > self.arena_bytes:
                self._free_arena(a)

    def _free_arena(self, a):
        i = self._arenas.index(a)
        del self._arenas[i]
        del self._bases[i]
        cbuf, a.cbuf = a.cbuf, None
        rc = _lib.lib.spc_buffer_free(cbuf)
        if rc < 0:
            self._client._raise(rc, "buffer_free")

    def trim(self):
        """Return every arena that holds no live tensor to the daemon."""
        self._drain()
        for a in [a for a in self._arenas if a.live == 0]:
            self._free_arena(a)

    def live_blocks(self):
        self._drain()
        return sum(a.live for a in self._arenas)

    def forget(self):
        """The client is gone (its buffers unmapped by spc_disconnect)."""
        for a in self._arenas:
            a.cbuf = None
        self._arenas, self._bases = [], []

    # -- tensors --
    def empty(self, shape, dtype, device=-1):
        """An uninitialized tensor of shape/dtype in spcoll memory: host
        memory, or device memory of CUDA ordinal `device` (>= 0)."""
        spc_dtype(dtype)
        shape = tuple(int(s) for s in shape)
        numel = 1
        for s in shape:
            if s < 0:
                raise ValueError("spcoll: negative dimension %d in shape %s"
                                 % (s, shape))
            numel *= s
        if numel == 0:
            return torch.empty(shape, dtype=dtype,
                               device=_cuda.torch_device(device))
        esize = torch.empty((), dtype=dtype).element_size()
        n = (numel * esize + ALIGN - 1) // ALIGN * ALIGN
        self._drain()
        for a in self._arenas:
            if a.device != device:
                continue
            off = a.take(n)
            if off is not None:
                break
        else:
            a = self._new_arena(n, device)
            off = a.take(n)
        if device >= 0:
            view = _cuda.DeviceView(a.base + off, numel * esize)
            weakref.finalize(view, _released, self._pending, a, off, n)
            return _cuda.device_tensor(view, device, dtype, shape)
        view = a.view_cls.from_address(a.base)
        weakref.finalize(view, _released, self._pending, a, off, n)
        t = torch.frombuffer(view, dtype=dtype, count=numel, offset=off)
        return t.view(shape)

    def locate(self, t):
        """(arena, byte offset) when t's bytes lie in one of our arenas and
        t is C-contiguous, else None."""
        if t.numel() == 0 or not t.is_contiguous():
            return None
        p = t.data_ptr()
        i = bisect.bisect_right(self._bases, p) - 1
        if i < 0:
            return None
        a = self._arenas[i]
        off = p - a.base
        if off + t.numel() * t.element_size() > a.size:
            return None
        if a.device != (-1 if t.device.type == "cpu" else t.device.index):
            return None
        return a, off

    def describe(self, t, what):
        """(spc_tensor, keepalive) for t as an op input: zero copy when t is
        in spcoll memory and contiguous, else staged (one copy)."""
        dev = check_device(t, what)
        dt = spc_dtype(t.dtype, what)
        loc = self.locate(t)
        keep = t
        if loc is None and t.numel() > 0:
            keep = self.stage(t)
            loc = self.locate(keep)
        return self.spc_tensor(keep, loc, dt, what, dev), keep

    def stage(self, t):
        """Copy t into spcoll memory: the one extra copy a tensor outside it
        costs (also how non-contiguous tensors are made contiguous). A CUDA
        tensor is copied on the current stream, into device memory."""
        s = self.empty(t.shape, t.dtype, check_device(t))
        with torch.no_grad():
            s.copy_(t)
        self.staged_bytes += t.numel() * t.element_size()
        self.staged_count += 1
        return s

    def spc_tensor(self, t, loc, dt, what, device=-1):
        ct = _lib.Tensor()
        if t.dim() > _lib.SPC_MAX_DIMS:
            raise ValueError("spcoll: %s has %d dims; at most %d" % (
                what, t.dim(), _lib.SPC_MAX_DIMS))
        # A 0-d tensor travels as shape [1]; an empty one sits at offset 0
        # of any arena of its place (it fits anywhere).
        shape = list(t.shape) or [1]
        if loc is None:
            mine = [a for a in self._arenas if a.device == device]
            loc = (mine[0] if mine else self._new_arena(1, device), 0)
        a, off = loc
        arr = _lib.int64_array(shape)
        rc = _lib.lib.spc_tensor_init(ctypes.byref(ct), a.cbuf, off, dt,
                                      len(shape), arr)
        if rc < 0:
            self._client._raise(rc, what)
        return ct
