"""The collectives on torch tensors, without autograd.

Each call describes its input (zero copy when it lies in spcoll memory and
is contiguous, else staged: one copy into a pooled buffer), asks the
library for the output shape (which also checks this rank's arguments
before any rank waits), allocates the output in spcoll memory and runs the
op; the daemon writes the output in place. Outputs are therefore always
zero copy, and feeding one op's output to the next costs no copy either.

grad_scale / scale: "up" multiplies every copied element by the group size,
"down" divides (one IEEE division), None leaves it: the seeds' backward
scaling, available on the copy ops that take it in libspclient.
"""
import ctypes
import pickle

import torch

from . import _cuda, _lib
from .errors import raise_status
from .memory import check_device, spc_dtype
from .state import resolve
from ._inflight import Call

lib = _lib.lib

_SCALES = {None: _lib.SCALE_NONE, "none": _lib.SCALE_NONE,
           "up": _lib.SCALE_UP, "down": _lib.SCALE_DOWN}
_REDUCE = {"sum": _lib.SUM, "max": _lib.MAX, "min": _lib.MIN}


def split_sizes(n, world):
    """The seeds' rule: n over world ranks gives n // world + 1 to the first
    n % world ranks and n // world to the rest."""
    n, world = int(n), int(world)
    return [n // world + (1 if i < n % world else 0) for i in range(world)]


def _scale(scale, what="grad_scale"):
    try:
        return _SCALES[scale]
    except (KeyError, TypeError):
        raise ValueError("spcoll: %s must be 'up', 'down' or None, got %r"
                         % (what, scale)) from None


def _sizes(sizes, what, expect=None):
    """sizes as a list of ints; with expect, exactly that many (the C op
    reads one entry per rank: a shorter list must not reach it)."""
    if sizes is None:
        return None
    if isinstance(sizes, torch.Tensor):
        sizes = sizes.tolist()
    try:
        vals = [int(s) for s in sizes]
    except (TypeError, ValueError):
        raise ValueError("spcoll: %s must be a list of ints, got %r"
                         % (what, sizes)) from None
    if expect is not None and len(vals) != expect:
        raise ValueError("spcoll: %s has %d entries for a group of %d: %r"
                         % (what, len(vals), expect, vals))
    return vals


class _Op:
    """A spc_op and the C arrays it points into (kept alive with it)."""

    def __init__(self, name, ctor, *args, arrays=(), scale=None):
        self.name = name
        self.arrays = arrays
        self.op = ctor(*args)
        if scale:
            self.op = lib.spc_op_scaled(self.op, scale)


class Handle:
    """An op started with async_op=True: the daemon runs it while Python
    goes on. wait() returns its output (raising its error); is_completed()
    polls without blocking. Do not change the input until it is done."""

    def __init__(self, call, y, bad, post):
        self._call, self._y, self._bad, self._post = call, y, bad, post

    def is_completed(self):
        return self._call.poll()

    def wait(self, timeout=None):
        """timeout: seconds (None: no limit); past it, an SpcollError with
        status SPC_ETIMEDOUT (the op is abandoned, its memory kept)."""
        try:
            self._call.wait(timeout)
        finally:
            if self._bad is not None:
                raise_status(self._bad[0], self._bad[1], self._call.name)
        return self._post(self._y) if self._post else self._y


def _run(group, op, x, what="input", out_shape=None, zero_out=False,
         reducing=False, async_op=False, post=None):
    """Run op on x through group; return the output tensor (spcoll memory).

    A bad argument of this rank (found by spc_out_shape before anything is
    sent) must still fail the op on every rank, or the others would wait
    for this rank forever: the op is sent anyway with a one-element
    output, the daemon fails it everywhere (naming this rank), and this
    rank raises the local message, which names the argument."""
    if not isinstance(x, torch.Tensor):
        raise TypeError("spcoll %s: %s must be a torch.Tensor, got %s"
                        % (op.name, what, type(x).__name__))
    if reducing and x.dtype == torch.bool:
        raise TypeError("spcoll %s: %s is bool; reductions need a numeric "
                        "dtype" % (op.name, what))
    c = group.client
    with c._lock:
        g = group._handle()
        pool = c.pool
        cin, keep = pool.describe(x, what)
        dev = check_device(x, what)
        # Device tensors: ordered on torch's current stream both ways.
        stream = _cuda.current_stream(dev)
        bad = None
        if out_shape is None:
            shape = (ctypes.c_int64 * _lib.SPC_MAX_DIMS)()
            nd = ctypes.c_int()
            rc = lib.spc_out_shape(g, ctypes.byref(op.op), ctypes.byref(cin),
                                   shape, ctypes.byref(nd))
            if rc < 0:
                bad = (rc, lib.spc_last_error(c._handle()).decode())
                out_shape = [1]
            else:
                out_shape = list(shape[:nd.value])
        y = pool.empty(out_shape, x.dtype, dev)
        if zero_out:
            y.zero_()
        cout = pool.spc_tensor(y, pool.locate(y), spc_dtype(x.dtype), "output",
                               dev)
        if async_op:
            call = Call(c, op.name, (op, cin, cout, keep, y), stream=stream)
            call.start(g, op.op, cin, cout)
            return Handle(call, y, bad, post)
        if stream is not None:
            rc = lib.spc_run_on_stream(g, ctypes.byref(op.op),
                                       ctypes.byref(cin), ctypes.byref(cout),
                                       _cuda.stream_handle(stream))
        else:
            rc = lib.spc_run(g, ctypes.byref(op.op), ctypes.byref(cin),
                             ctypes.byref(cout))
        del keep
        if bad is not None:
            raise_status(bad[0], bad[1], op.name)
        if rc < 0:
            c._raise(rc, op.name)
    return post(y) if post else y


def _dim(x, dim, what="dim"):
    """dim normalized against x (Python style negatives), checked."""
    nd = max(x.dim(), 1)
    try:
        d = int(dim)
    except (TypeError, ValueError):
        raise ValueError("spcoll: %s must be an int, got %r" % (what, dim)) from None
    if d < -nd or d >= nd:
        raise ValueError("spcoll: %s %d is out of range for a %d-d tensor"
                         % (what, d, x.dim()))
    return d % nd


def gradient(name):
    """(function, scale) of op `name`'s gradient in the library's op list:
    the function of this module that, called with the forward op's
    arguments, computes its backward, and the seeds' grad scale ('up',
    'down' or None). all_to_all's swaps its dims; the caller does that."""
    info = _lib.OPS[name]
    if info.grad is None:
        raise ValueError("spcoll: the op list gives %s no gradient op" % name)
    return globals()[info.grad], info.grad_scale


# ---- forward ops ---------------------------------------------------------

def split(x, group=None, dim=-1, sizes=None, scale=None, async_op=False):
    """Every rank passes the same full x; rank r gets piece r along dim
    (sizes, or the rule)."""
    group = resolve(group)
    s = _sizes(sizes, "split sizes", group.size)
    arr = _lib.int64_array(s)
    return _run(group, _Op("split", lib.spc_op_split, int(dim), arr,
                           arrays=(arr,), scale=_scale(scale, "scale")), x,
                async_op=async_op)


def all_gather(x, group=None, dim=-1, sizes=None, scale=None, async_op=False):
    """Concatenation along dim of every rank's x in rank order. Ranks may
    hold different sizes along dim: pass sizes (every rank's) then."""
    group = resolve(group)
    s = _sizes(sizes, "gather sizes", group.size)
    arr = _lib.int64_array(s)
    return _run(group, _Op("all_gather", lib.spc_op_all_gather, int(dim), arr,
                           arrays=(arr,), scale=_scale(scale, "scale")), x,
                async_op=async_op)


def all_to_all(x, group=None, scatter_dim=2, gather_dim=1, gather_size=None,
               async_op=False):
    """x cut in w pieces along scatter_dim (rule), piece j to rank j; the
    received pieces concatenated along gather_dim. gather_size: the total
    along gather_dim when the ranks' sizes differ (default local * w)."""
    group = resolve(group)
    G = 0 if gather_size is None else int(gather_size)
    return _run(group, _Op("all_to_all", lib.spc_op_all_to_all,
                           int(scatter_dim), int(gather_dim), G), x,
                async_op=async_op)


def all_to_all_v(x, group=None, in_splits=None, out_splits=None,
                 async_op=False):
    """Along dim 0: rows in_splits[j] go to rank j; rows out_splits[i] come
    from rank i. None: the rule over x's rows (every rank the same rows)."""
    group = resolve(group)
    w, r = group.size, group.rank
    n = x.shape[0] if x.dim() else 1
    ins = _sizes(in_splits, "input_split_sizes", w)
    outs = _sizes(out_splits, "output_split_sizes", w)
    if ins is None:
        ins = split_sizes(n, w)
    if outs is None:
        outs = [split_sizes(n, w)[r]] * w
    a_in, a_out = _lib.int64_array(ins), _lib.int64_array(outs)
    return _run(group, _Op("all_to_all_v", lib.spc_op_all_to_all_v, a_in,
                           a_out, arrays=(a_in, a_out)), x, async_op=async_op)


def all_reduce(x, group=None, op="sum", async_op=False):
    """Elementwise op ('sum', 'max', 'min') over ranks; out of place."""
    group = resolve(group)
    try:
        red = _REDUCE[op]
    except (KeyError, TypeError):
        raise ValueError("spcoll all_reduce: op must be 'sum', 'max' or "
                         "'min', got %r" % (op,)) from None
    shape = x.shape
    return _run(group, _Op("all_reduce", lib.spc_op_all_reduce, red), x,
                reducing=True, async_op=async_op,
                post=lambda y: y.view(shape))


def reduce_scatter(x, group=None, dim=0, sizes=None, async_op=False):
    """Piece r along dim (sizes or rule) of the sum over ranks of x."""
    group = resolve(group)
    s = _sizes(sizes, "reduce-scatter sizes", group.size)
    arr = _lib.int64_array(s)
    return _run(group, _Op("reduce_scatter", lib.spc_op_reduce_scatter,
                           int(dim), arr, arrays=(arr,)), x, reducing=True,
                async_op=async_op)


def zigzag_split(x, group=None, dim=0, scale=None):
    """Load-balanced CP split: L (divisible by 2w) in 2w chunks, rank r
    keeps chunks r and 2w-1-r."""
    group = resolve(group)
    return _run(group, _Op("zigzag_split", lib.spc_op_zigzag_split, int(dim),
                           scale=_scale(scale, "scale")), x)


def zigzag_gather(x, group=None, dim=0, scale=None):
    """Inverse of zigzag_split: the full sequence in natural order."""
    group = resolve(group)
    return _run(group, _Op("zigzag_gather", lib.spc_op_zigzag_gather, int(dim),
                           scale=_scale(scale, "scale")), x)


def _seq_lens(seq_lens):
    s = _sizes(seq_lens, "sequence_lengths")
    if not s:
        raise ValueError("spcoll: sequence_lengths must list at least one "
                         "sequence, got %r" % (seq_lens,))
    return s


def packed_split(x, group=None, seq_lens=None, dim=0, scale=None):
    """Sequences of seq_lens packed along dim: rank r takes its piece (rule)
    of each, concatenated. Positions past sum(seq_lens) are dropped."""
    group = resolve(group)
    s = _seq_lens(seq_lens)
    arr = _lib.int64_array(s)
    return _run(group, _Op("packed_split", lib.spc_op_packed_split, int(dim),
                           arr, len(s), arrays=(arr,),
                           scale=_scale(scale, "scale")), x)


def packed_gather(x, group=None, seq_lens=None, dim=0, scale=None,
                  total=None):
    """Inverse of packed_split. total: the output's size along dim when it
    is more than sum(seq_lens) (the rest is zero), as a split backward
    needs."""
    group = resolve(group)
    s = _seq_lens(seq_lens)
    arr = _lib.int64_array(s)
    op = _Op("packed_gather", lib.spc_op_packed_gather, int(dim), arr, len(s),
             arrays=(arr,), scale=_scale(scale, "scale"))
    shape = None
    if total is not None and total != sum(s):
        shape = list(x.shape)
        shape[_dim(x, dim)] = int(total)
    return _run(group, op, x, out_shape=shape, zero_out=shape is not None)


def sp2hp(x, group=None):
    """Megatron [..., H] seen as [n, H] -> [w*n, H/w]."""
    x2 = x.reshape(-1, x.shape[-1])
    return all_to_all(x2, group, scatter_dim=1, gather_dim=0)


def hp2sp(x, group=None):
    """Megatron [N, h] -> [N/w, w*h]."""
    x2 = x.reshape(-1, x.shape[-1])
    return all_to_all(x2, group, scatter_dim=0, gather_dim=1)


# ---- helpers built on them ----------------------------------------------

def all_gather_sizes(n, group=None):
    """Every rank's integer n, in rank order (one small all-gather)."""
    group = resolve(group)
    t = group.client.empty([1], torch.int64)
    t[0] = int(n)
    return all_gather(t, group, 0).tolist()


def all_gather_object(obj, group=None):
    """Every rank's picklable obj, in rank order (torch.distributed's
    all_gather_object). Only for trusted peers: it unpickles their bytes."""
    group = resolve(group)
    data = pickle.dumps(obj)
    sizes = all_gather_sizes(len(data), group)
    # an empty payload cannot happen (pickle writes at least a few bytes)
    t = group.client.empty([len(data)], torch.uint8)
    ctypes.memmove(t.data_ptr(), data, len(data))
    g = all_gather(t, group, 0, sizes)
    full = ctypes.string_at(g.data_ptr(), g.numel())
    out, pos = [], 0
    for s in sizes:
        out.append(pickle.loads(full[pos:pos + s]))
        pos += s
    return out


def barrier(group=None):
    """Returns when every rank of the group has called it."""
    group = resolve(group)
    t = group.client.zeros([1], torch.int32)
    all_reduce(t, group)
