"""torch.distributed's collectives as spcoll ops (for spcoll.distributed).

Every collective here is ONE daemon op on flat (1-D) views, started with
spc_start, plus a local `finish` that writes the result where torch wants
it. How each maps:

  all_reduce SUM/MAX/MIN   all_reduce
  all_reduce AVG           all_reduce SUM, then / group size (floats only)
  all_reduce PRODUCT, BAND, BOR, BXOR
                           all_gather, then the reduction done locally in
                           rank order (the daemon has no such reduction)
  reduce_scatter           reduce_scatter with the pieces' sizes (SUM, AVG);
                           other ops as all_reduce, then this rank's piece
  reduce(root) SUM/AVG     reduce_scatter with sizes [n at root, 0 elsewhere]
  broadcast(root)          all_gather with sizes [n at root, 0 elsewhere]
  gather(root)             all_to_all_v: every rank sends n to root only
  scatter(root)            all_to_all_v: root sends piece j to rank j
  all_gather (list), all_gather_into_tensor
                           all_gather with every rank's size
  all_to_all (list), all_to_all_single
                           all_to_all_v in elements
  barrier                  all_reduce of one int32

bool reduces as uint8: SUM/MAX/BOR are logical or (MAX), MIN/PRODUCT/BAND
logical and (MIN), as NCCL does.

Inputs outside spcoll memory (or non-contiguous) are staged: one copy into
the client's pool. Outputs are written by the daemon into the caller's
tensor when it lies in spcoll memory and is contiguous (zero copy: make it
with spcoll.distributed.empty), else into a pool tensor copied back in
finish. In-place ops (all_reduce, broadcast) always copy back: the daemon
does not read and write one tensor in one op.

CUDA tensors: a collective runs on the device path when its tensors are
on one GPU (`use` is told the caller's tensors before the op is built);
its pool tensors are then device memory of that GPU, inputs are staged
and outputs copied back on torch's current stream, and the op is ordered
on that stream both ways (see _inflight.Call). Host and device tensors in
one collective are refused with a ValueError naming both.
"""
import functools
import operator

import torch
import torch.distributed as dist

from . import _cuda, _lib
from ._inflight import Call
from .memory import spc_dtype
from .ops import _Op

lib = _lib.lib

_KINDS = [("SUM", "sum"), ("AVG", "avg"), ("PRODUCT", "product"),
          ("MIN", "min"), ("MAX", "max"), ("BAND", "band"), ("BOR", "bor"),
          ("BXOR", "bxor"), ("PREMUL_SUM", "premul_sum")]
_DAEMON = {"sum": _lib.SUM, "max": _lib.MAX, "min": _lib.MIN}
_BOOL = {"sum": "max", "max": "max", "bor": "max", "min": "min",
         "product": "min", "band": "min"}
_LOCAL = {"product": operator.mul, "band": torch.bitwise_and,
          "bor": torch.bitwise_or, "bxor": torch.bitwise_xor}


def reduce_kind(op):
    """torch's ReduceOp as one of the names above."""
    for attr, name in _KINDS:
        v = getattr(dist.ReduceOp, attr, None)
        if v is not None and op == v:
            return name
    raise ValueError("spcoll: unknown reduce op %r" % (op,))


class Coll:
    """The collectives of one spcoll.Group; `name` prefixes error calls."""

    def __init__(self, group):
        self.group = group
        self.client = group.client
        self.pool = group.client.pool
        self.w, self.r = group.size, group.rank
        self.device = -1          # the place of the collective being built

    def use(self, tensors, what="the collective's tensors"):
        """Set the place (host, or a CUDA ordinal) of the next collective
        from the caller's tensors (nested lists allowed)."""
        flat = []

        def walk(x):
            if isinstance(x, torch.Tensor):
                flat.append(x)
            elif isinstance(x, (list, tuple)):
                for y in x:
                    walk(y)
        walk(tensors)
        self.device = _cuda.place(flat, what)
        return self.device

    # -- memory --
    def flat_in(self, t):
        """t as a flat tensor the daemon can read (zero copy when it is)."""
        t = t.detach()
        self._same_place(t, "input")
        if t.numel() == 0 or self.pool.locate(t) is not None:
            return t.reshape(-1)
        return self.pool.stage(t).view(-1)

    def cat_in(self, ts, dtype):
        """The tensors of a list, concatenated in one pool tensor."""
        n = sum(t.numel() for t in ts)
        for t in ts:
            self._same_place(t, "input")
        x = self.pool.empty([n], dtype, self.device)
        off = 0
        with torch.no_grad():
            for t in ts:
                x[off:off + t.numel()].copy_(t.reshape(-1))
                off += t.numel()
        self.pool.staged_bytes += n * x.element_size()
        self.pool.staged_count += 1
        return x

    def flat_out(self, t):
        """(flat tensor the daemon writes, copy-back target or None)."""
        self._same_place(t, "output")
        if t.numel() and self.pool.locate(t) is not None:
            return t.view(-1), None
        return self.pool.empty([t.numel()], t.dtype, self.device), t

    def empty(self, n, dtype):
        return self.pool.empty([n], dtype, self.device)

    def _same_place(self, t, what):
        d = _cuda.place([t], what)
        if d != self.device:
            name = lambda k: "cpu" if k < 0 else "cuda:%d" % k
            raise ValueError(
                "spcoll: this collective's %s is on %s, its other tensors on "
                "%s; a collective's tensors must all be on the CPU or all on "
                "one GPU" % (what, name(d), name(self.device)))

    # -- one daemon op --
    def start(self, name, op, x, y, finish=None):
        """Start op on flat x -> flat y; the Call keeps both alive."""
        dt = spc_dtype(x.dtype, "input")
        with self.client._lock:
            g = self.group._handle()
            dev = _cuda.place([x, y], "%s's input and output" % name)
            cin = self.pool.spc_tensor(x, self.pool.locate(x), dt, "input",
                                       dev)
            cout = self.pool.spc_tensor(y, self.pool.locate(y), dt, "output",
                                        dev)
            call = Call(self.client, name, (op, x, y, cin, cout), finish,
                        stream=_cuda.current_stream(dev))
            return call.start(g, op.op, cin, cout)

    def _all_gather(self, x, sizes):
        arr = _lib.int64_array(sizes)
        return _Op("all_gather", lib.spc_op_all_gather, 0, arr, arrays=(arr,))

    # -- reductions --
    def _plan_reduce(self, kind, dtype):
        """(daemon kind or None for a local reduction, dtype to move as)."""
        if kind == "premul_sum":
            raise ValueError("spcoll: ReduceOp.PREMUL_SUM is not supported")
        if dtype == torch.bool:
            if kind in _BOOL:
                return _BOOL[kind], torch.uint8
            if kind == "avg":
                raise TypeError("spcoll: ReduceOp.AVG on a bool tensor")
            return None, torch.uint8
        if kind == "avg" and not dtype.is_floating_point:
            raise TypeError("spcoll: ReduceOp.AVG needs a floating-point "
                            "tensor, got %s" % dtype)
        if kind in ("band", "bor", "bxor") and dtype.is_floating_point:
            raise TypeError("spcoll: ReduceOp.%s needs an integer tensor, "
                            "got %s" % (kind.upper(), dtype))
        if kind == "avg":
            return "sum", dtype
        return (kind if kind in _DAEMON else None), dtype

    def reduce(self, name, t, kind, sizes=None, out_dtype=None):
        """Start the reduction of flat-able t over the group; the Call's
        result is this rank's flat result: all of it, or piece r of
        `sizes` (reduce_scatter). t may be a list: reduce_scatter's
        inputs, concatenated."""
        dtype = out_dtype or t.dtype
        dkind, mdtype = self._plan_reduce(kind, dtype)
        x = self.flat_in(t)
        if mdtype != dtype:
            x = x.view(mdtype)
        n = x.numel()
        offs = [0]
        for s in sizes or []:
            offs.append(offs[-1] + s)
        w, r = self.w, self.r

        def piece(y):
            return y if sizes is None else y[offs[r]:offs[r + 1]]

        def as_result(y):
            y = y.view(dtype) if mdtype != dtype else y
            if kind == "avg":
                y = y / w
            return y

        if dkind == "sum" and sizes is not None:
            arr = _lib.int64_array(sizes)
            op = _Op("reduce_scatter", lib.spc_op_reduce_scatter, 0, arr,
                     arrays=(arr,))
            y = self.empty(sizes[r], mdtype)
            return self.start(name, op, x, y, lambda: as_result(y))
        if dkind is not None:
            op = _Op("all_reduce", lib.spc_op_all_reduce, _DAEMON[dkind])
            y = self.empty(n, mdtype)
            return self.start(name, op, x, y, lambda: as_result(piece(y)))
        fn = _LOCAL["band" if (kind == "product" and dtype == torch.bool)
                    else kind]
        y = self.empty(n * w, mdtype)

        def local():
            rows = [piece(y[i * n:(i + 1) * n]) for i in range(w)]
            return as_result(functools.reduce(fn, rows))
        return self.start(name, self._all_gather(x, None), x, y, local)
