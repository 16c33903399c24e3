"""Backend "spcoll" for torch.distributed: trainers' existing code runs over
the node's spcolld unchanged.

    import spcoll                       # registers the backend
    dist.init_process_group("spcoll", init_method="env://", ...)
    dist.all_to_all_single(out, x, group=dist.new_group([0, 1]))

It is a Python backend: a torch.distributed.ProcessGroup subclass (the
Python-backend base on torch 1.13 and on 2.x, where a creator returning a
ProcessGroup is used as the group itself), registered with
Backend.register_backend(extended_api=True) so that each group knows torch's
group id and the global ranks in it.

Group names: the world group's rank 0 draws a job id and publishes it in
torch's store (the one init_process_group made: env://, tcp://, file://);
every group of the job is then "torch.<job>.<group id>" with torch's group
id, the same on every member, so two jobs on one node never share a group
and a job's groups are told apart. Non-members of a new_group never reach
the backend (torch gives them GroupMember.NON_GROUP_MEMBER).

Every op is async inside: it starts a daemon op (spc_start) and returns a
Work; torch's blocking calls wait() on it. See _dist_coll for how each
collective maps to spcoll's ops, and docs/python.md.
"""
import datetime
import functools
import os
import threading
import uuid

import torch
import torch.distributed as dist

from .client import default_client
from ._dist_coll import Coll, reduce_kind
from . import _p2p
from .errors import SpcollError

BACKEND = "spcoll"
_job = None            # this process's job id (from the world group's store)
GRACE_S = 5.0          # a wait's margin over the daemon's op timeout


class Work(dist._Work):
    """An op in flight. wait() blocks until it is done (raising its error as
    a RuntimeError), is_completed() polls without blocking, get_future()
    gives a torch.futures.Future completed by a helper thread."""

    def __init__(self, pg, call, outputs):
        super().__init__()
        self._pg, self._call, self._outputs = pg, call, outputs
        self._fut = None
        self._fut_lock = threading.Lock()

    def is_completed(self):
        return self._call.poll()

    def is_success(self):
        return self._call.poll() and self._call.state == "ok"

    def exception(self):
        return self._call.error

    def wait(self, timeout=None):
        # The daemon fails an op some rank never issued after the group's
        # timeout, on every rank, naming the missing ranks; this wait gives
        # it GRACE_S more before it gives up on the daemon itself (giving up
        # first would leave the group and tell the others only "left").
        t = self._pg._timeout_s + GRACE_S if self._pg._timeout_s > 0 else None
        if isinstance(timeout, datetime.timedelta) and timeout.total_seconds() > 0:
            t = timeout.total_seconds()
        try:
            self._call.wait(t)
        except Exception as e:
            if self._call.state == "lost":
                self._pg._abort("an op timed out: %s" % self._call.error)
            elif getattr(e, "status", None) in _BREAKS_GROUP:
                # the daemon broke the group: refuse later ops here too
                self._pg._abort(str(e))
            raise
        return True

    def result(self):
        return self._outputs

    def _source_rank(self):
        """The rank a receive's data came from (torch's recv with no src
        asks the Work)."""
        src = getattr(self._call, "source", None)
        if src is None or src.value < 0:
            raise RuntimeError("spcoll: _source_rank() of a Work that is "
                               "not a completed receive")
        return src.value

    def get_future(self):
        with self._fut_lock:
            if self._fut is None:
                self._fut = torch.futures.Future()
                _completer().put(self)
            return self._fut

    def _complete(self):
        try:
            self.wait()
        except Exception as e:
            self._fut.set_exception(e)
            return
        self._fut.set_result(self._outputs)

    def __repr__(self):
        return "<spcoll.distributed.Work %s %s>" % (self._call.name,
                                                    self._call.state)


# Failures after which the daemon has broken the group (a timeout, a lost
# rank or node, an operator's abort).
_BREAKS_GROUP = (-14, -7, -17, -11)

_completers = {}


def _completer():
    """This process's queue of Works whose futures a helper thread
    completes in issue order (made on first use; a forked child makes its
    own)."""
    q = _completers.get(os.getpid())
    if q is None:
        import queue
        q = _completers[os.getpid()] = queue.SimpleQueue()

        def loop():
            while True:
                q.get()._complete()
        threading.Thread(target=loop, daemon=True,
                         name="spcoll-futures").start()
    return q


class _Done(Work):
    """A Work already complete (an op with nothing to move)."""

    def __init__(self, pg, outputs):
        from ._inflight import Call
        c = Call(pg._group.client, "noop", None)
        c.state = "ok"
        super().__init__(pg, c, outputs)


def _collective(method):
    """A collective whose local argument checks fail on one rank must still
    fail on the others, which are waiting in the daemon for this rank's op:
    on a ValueError/TypeError raised here before anything was sent, send a
    poison op (an all_reduce whose output has the wrong size) that the
    daemon fails on every rank, then raise the local error."""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            # host or device path, from the caller's tensors (mixed: refused)
            self._coll.use(args, "%s's tensors" % method.__name__)
            return method(self, *args, **kwargs)
        except (ValueError, TypeError) as e:
            if isinstance(e, SpcollError) or self._broken is not None:
                raise
            self._poison(method.__name__, e)
            raise
    return wrapper


def _one(tensors, what):
    if len(tensors) != 1:
        raise ValueError("spcoll: %s takes one tensor per process, got %d"
                         % (what, len(tensors)))
    t = tensors[0]
    if not isinstance(t, torch.Tensor):
        raise TypeError("spcoll: %s: expected a tensor, got %s"
                        % (what, type(t).__name__))
    return t


def _copy_to(dst, src):
    with torch.no_grad():
        dst.copy_(src.view(dst.shape) if src.numel() == dst.numel() else src)


class ProcessGroupSpcoll(dist.ProcessGroup):
    """One torch process group = one spcoll group (self.spcoll_group)."""

    def __init__(self, group, timeout_s, store):
        super().__init__(group.rank, group.size)
        self._group = group
        self._coll = Coll(group)
        self._timeout_s = timeout_s
        self._store = store
        self._broken = None
        self._p2p = _p2p.Links(self)

    @property
    def spcoll_group(self):
        """The spcoll.Group under this process group (for the native
        wrappers, which also accept the process group itself)."""
        return self._group

    def getBackendName(self):
        return BACKEND

    def name(self):
        return BACKEND

    def _abort(self, why):
        """After a timeout: leave the spcoll group so that the other ranks'
        ops fail (SPC_EPEERLOST) instead of waiting, and refuse new ops."""
        if self._broken is None:
            self._broken = why
            try:
                self._group.leave()
            except Exception:
                pass

    def shutdown(self):
        """Leave the spcoll group (torch 2.x calls this from
        destroy_process_group; on 1.13 the group's collection does). Other
        ranks' ops still waiting on it fail with SPC_EPEERLOST.
        Idempotent."""
        if getattr(self, "_left", False):
            return
        self._left = True
        if self._broken is None:
            self._broken = "destroyed"
        try:
            self._group.leave()
        except Exception:         # client closed, forked child: nothing held
            pass

    def abort(self):
        self.shutdown()

    def __del__(self):
        try:
            if self._group.client._pid == os.getpid():
                self.shutdown()
        except Exception:         # interpreter shutdown
            pass

    def _poison(self, what, err):
        c = self._coll
        c.device = -1             # a host op whatever the failed one was
        x = c.empty(1, torch.int32)
        y = c.empty(2, torch.int32)
        from ._dist_coll import _DAEMON
        from ._lib import lib
        from .ops import _Op
        op = _Op("%s (rank %d: %s)" % (what, c.r, str(err)[:120]),
                 lib.spc_op_all_reduce, _DAEMON["sum"])
        try:
            c.start(op.name, op, x, y).wait(self._timeout_s)
        except Exception:
            pass            # it fails: that is its purpose

    def _work(self, fn, outputs, what):
        if self._broken is not None:
            raise RuntimeError("spcoll: process group %r is broken (%s); "
                               "create a new one" % (self._group.name,
                                                     self._broken))
        try:
            call = fn()
        finally:
            self._coll.device = -1    # the next op says its own place
        w = Work(self, call, outputs)
        if _OLD_TORCH and _called_through_cpp():
            # torch 1.x's C++ calls a Python Work's wait() as the base
            # c10d::Work::wait, which never sees this op end: hand C++ a
            # Work of torch's own over this one's future instead (its
            # wait() does not raise an op's error: Python callers keep
            # this Work, whose wait() does).
            return torch._C._distributed_c10d._create_work_from_future(
                w.get_future())
        return w

    # ---- reductions ----
    @_collective
    def allreduce(self, tensors, opts=None):
        t = _one(tensors, "all_reduce")
        kind = reduce_kind(opts.reduceOp if opts else dist.ReduceOp.SUM)
        c = self._coll

        def go():
            call = c.reduce("all_reduce", t, kind)
            return _then(call, lambda y: _copy_to(t, y))
        return self._work(go, [t], "all_reduce")

    @_collective
    def allreduce_coalesced(self, tensors, opts=None):
        kind = reduce_kind(opts.reduceOp if opts else dist.ReduceOp.SUM)
        if not tensors:
            return _Done(self, tensors)
        if len({t.dtype for t in tensors}) != 1:
            raise ValueError("spcoll: all_reduce_coalesced needs one dtype")
        c = self._coll

        def go():
            x = c.cat_in(tensors, tensors[0].dtype)

            def fin(y):
                off = 0
                for t in tensors:
                    _copy_to(t, y[off:off + t.numel()])
                    off += t.numel()
            return _then(c.reduce("all_reduce_coalesced", x, kind), fin)
        return self._work(go, tensors, "all_reduce_coalesced")

    @_collective
    def reduce(self, tensors, opts):
        t = _one(tensors, "reduce")
        kind = reduce_kind(opts.reduceOp)
        root, c = opts.rootRank, self._coll
        n = t.numel()

        def go():
            sizes = None
            if kind in ("sum", "avg"):
                sizes = [n if j == root else 0 for j in range(c.w)]
            call = c.reduce("reduce", t, kind, sizes)
            return _then(call, lambda y: _copy_to(t, y) if c.r == root else None)
        return self._work(go, [t], "reduce")

    @_collective
    def reduce_scatter(self, outputs, inputs, opts=None):
        out = _one(outputs, "reduce_scatter")
        ins = inputs[0] if len(inputs) == 1 else None
        if ins is None or len(ins) != self._coll.w:
            raise ValueError("spcoll: reduce_scatter needs a list of %d "
                             "input tensors" % self._coll.w)
        kind = reduce_kind(opts.reduceOp if opts else dist.ReduceOp.SUM)
        c = self._coll

        def go():
            x = c.cat_in(ins, out.dtype)
            sizes = [t.numel() for t in ins]
            return _then(c.reduce("reduce_scatter", x, kind, sizes),
                         lambda y: _copy_to(out, y))
        return self._work(go, [out], "reduce_scatter")

    @_collective
    def _reduce_scatter_base(self, out, inp, opts=None):
        kind = reduce_kind(opts.reduceOp if opts else dist.ReduceOp.SUM)
        c = self._coll
        if inp.numel() != out.numel() * c.w:
            raise ValueError("spcoll: reduce_scatter_tensor: input has %d "
                             "elements, want %d x %d" % (inp.numel(), c.w,
                                                         out.numel()))

        def go():
            sizes = [out.numel()] * c.w
            return _then(c.reduce("reduce_scatter_tensor", inp, kind, sizes),
                         lambda y: _copy_to(out, y))
        return self._work(go, [out], "reduce_scatter_tensor")

    # ---- copies ----
    @_collective
    def broadcast(self, tensors, opts):
        t = _one(tensors, "broadcast")
        root, c = opts.rootRank, self._coll
        n = t.numel()

        def go():
            x = c.flat_in(t) if c.r == root else c.empty(0, t.dtype)
            y = c.empty(n, t.dtype)
            sizes = [n if j == root else 0 for j in range(c.w)]
            fin = (lambda: None) if c.r == root else (lambda: _copy_to(t, y))
            return c.start("broadcast", c._all_gather(x, sizes), x, y, fin)
        return self._work(go, [t], "broadcast")

    @_collective
    def allgather(self, outputs, inputs, opts=None):
        t = _one(inputs, "all_gather")
        outs = outputs[0] if len(outputs) == 1 else None
        c = self._coll
        if outs is None or len(outs) != c.w:
            raise ValueError("spcoll: all_gather needs a list of %d output "
                             "tensors" % c.w)

        def go():
            x = c.flat_in(t)
            sizes = [o.numel() for o in outs]
            y = c.empty(sum(sizes), t.dtype)

            def fin():
                off = 0
                for o, s in zip(outs, sizes):
                    _copy_to(o, y[off:off + s])
                    off += s
            return c.start("all_gather", c._all_gather(x, sizes), x, y, fin)
        return self._work(go, outputs, "all_gather")

    @_collective
    def _allgather_base(self, out, inp, opts=None):
        c = self._coll
        if out.numel() != inp.numel() * c.w:
            raise ValueError("spcoll: all_gather_into_tensor: output has %d "
                             "elements, want %d x %d" % (out.numel(), c.w,
                                                         inp.numel()))

        def go():
            x = c.flat_in(inp)
            y, back = c.flat_out(out)
            fin = (lambda: _copy_to(back, y)) if back is not None else None
            return c.start("all_gather_into_tensor", c._all_gather(x, None),
                           x, y, fin)
        return self._work(go, [out], "all_gather_into_tensor")

    @_collective
    def allgather_coalesced(self, output_lists, inputs, opts=None):
        """output_lists[j][i] gets rank j's inputs[i]: one all_gather of
        each rank's inputs back to back."""
        c = self._coll
        if len(output_lists) != c.w:
            raise ValueError("spcoll: all_gather_coalesced needs %d output "
                             "lists (one per rank), got %d"
                             % (c.w, len(output_lists)))
        if not inputs:
            return _Done(self, output_lists)
        dtype = inputs[0].dtype

        def go():
            x = c.cat_in(inputs, dtype)
            sizes = [sum(t.numel() for t in l) for l in output_lists]
            y = c.empty(sum(sizes), dtype)

            def fin():
                off = 0
                for l in output_lists:
                    for o in l:
                        _copy_to(o, y[off:off + o.numel()])
                        off += o.numel()
            return c.start("all_gather_coalesced", c._all_gather(x, sizes),
                           x, y, fin)
        return self._work(go, output_lists, "all_gather_coalesced")

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        works = [self._allgather_base(o, i, opts) for o, i in zip(outputs, inputs)]
        return _Several(self, works, outputs)

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        works = [self._reduce_scatter_base(o, i, opts)
                 for o, i in zip(outputs, inputs)]
        return _Several(self, works, outputs)

    @_collective
    def gather(self, outputs, inputs, opts):
        t = _one(inputs, "gather")
        root, c = opts.rootRank, self._coll
        outs = outputs[0] if c.r == root else []
        if c.r == root and len(outs) != c.w:
            raise ValueError("spcoll: gather needs a list of %d output "
                             "tensors on the root" % c.w)
        n = t.numel()

        def go():
            x = c.flat_in(t)
            ins = [n if j == root else 0 for j in range(c.w)]
            osz = [o.numel() for o in outs] if c.r == root else [0] * c.w
            y = c.empty(sum(osz), t.dtype)

            def fin():
                off = 0
                for o, s in zip(outs, osz):
                    _copy_to(o, y[off:off + s])
                    off += s
            return c.start("gather", _a2av(ins, osz), x, y, fin)
        return self._work(go, outputs, "gather")

    @_collective
    def scatter(self, outputs, inputs, opts):
        t = _one(outputs, "scatter")
        root, c = opts.rootRank, self._coll
        ins = inputs[0] if c.r == root else []
        if c.r == root and len(ins) != c.w:
            raise ValueError("spcoll: scatter needs a list of %d input "
                             "tensors on the root" % c.w)
        n = t.numel()

        def go():
            if c.r == root:
                x = c.cat_in(ins, t.dtype)
                isz = [i.numel() for i in ins]
            else:
                x, isz = c.empty(0, t.dtype), [0] * c.w
            osz = [n if j == root else 0 for j in range(c.w)]
            y, back = c.flat_out(t)
            fin = (lambda: _copy_to(back, y)) if back is not None else None
            return c.start("scatter", _a2av(isz, osz), x, y, fin)
        return self._work(go, [t], "scatter")

    @_collective
    def alltoall_base(self, out, inp, out_splits, in_splits, opts=None):
        c = self._coll
        w = c.w

        def rows_to_elems(t, splits, what):
            rows = t.shape[0] if t.dim() else 1
            inner = t.numel() // rows if rows else 0
            if not splits:
                if rows % w:
                    raise ValueError("spcoll: all_to_all_single: %s has %d "
                                     "rows, not divisible by %d (pass split "
                                     "sizes)" % (what, rows, w))
                splits = [rows // w] * w
            if len(splits) != w or sum(splits) != rows:
                raise ValueError("spcoll: all_to_all_single: %s split sizes "
                                 "%s do not cut its %d rows in %d"
                                 % (what, list(splits), rows, w))
            return [int(s) * inner for s in splits]

        isz = rows_to_elems(inp, in_splits, "input")
        osz = rows_to_elems(out, out_splits, "output")

        def go():
            x = c.flat_in(inp)
            y, back = c.flat_out(out)
            fin = (lambda: _copy_to(back, y)) if back is not None else None
            return c.start("all_to_all_single", _a2av(isz, osz), x, y, fin)
        return self._work(go, [out], "all_to_all_single")

    @_collective
    def alltoall(self, outputs, inputs, opts=None):
        c = self._coll
        if len(outputs) != c.w or len(inputs) != c.w:
            raise ValueError("spcoll: all_to_all needs %d input and output "
                             "tensors" % c.w)

        def go():
            x = c.cat_in(inputs, inputs[0].dtype)
            isz = [t.numel() for t in inputs]
            osz = [t.numel() for t in outputs]
            y = c.empty(sum(osz), inputs[0].dtype)

            def fin():
                off = 0
                for o, s in zip(outputs, osz):
                    _copy_to(o, y[off:off + s])
                    off += s
            return c.start("all_to_all", _a2av(isz, osz), x, y, fin)
        return self._work(go, outputs, "all_to_all")

    def barrier(self, opts=None):
        c = self._coll

        def go():
            x = c.empty(1, torch.int32)
            x.zero_()
            return c.reduce("barrier", x, "sum")
        return self._work(go, [], "barrier")

    # ---- point to point (see _p2p) ----
    def send(self, tensors, dst, tag=0):
        t = _one(tensors, "send")
        return self._work(lambda: self._p2p.send(t, dst, tag), [t], "send")

    def recv(self, tensors, src, tag=0):
        t = _one(tensors, "recv")
        return self._work(lambda: self._p2p.recv(t, src, tag), [t], "recv")

    def recv_anysource(self, tensors, tag=0):
        t = _one(tensors, "recv")
        return self._work(lambda: self._p2p.recv(t, -1, tag), [t], "recv")

    # ---- torch 2.x names of the single-tensor forms ----
    def all_gather_single(self, out, inp, opts=None):
        return self._allgather_base(out, inp, opts)

    def reduce_scatter_single(self, out, inp, opts=None):
        return self._reduce_scatter_base(out, inp, opts)

    def all_to_all_single(self, out, inp, out_splits, in_splits, opts=None):
        return self.alltoall_base(out, inp, out_splits, in_splits, opts)

    @_collective
    def gather_single(self, out, inp, opts):
        """gather into one tensor on the root (torch 2.x's gather_single)."""
        c = self._coll
        root = opts.rootRank
        n = inp.numel()
        if c.r == root and out.numel() != n * c.w:
            raise ValueError("spcoll: gather: the root's output has %d "
                             "elements, want %d x %d" % (out.numel(), c.w, n))

        def go():
            x = c.flat_in(inp)
            ins = [n if j == root else 0 for j in range(c.w)]
            osz = [n] * c.w if c.r == root else [0] * c.w
            y, back = c.flat_out(out) if c.r == root else (c.empty(0, inp.dtype), None)
            fin = (lambda: _copy_to(back, y)) if back is not None else None
            return c.start("gather", _a2av(ins, osz), x, y, fin)
        return self._work(go, [out], "gather")

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        return self.allgather_into_tensor_coalesced(outputs, inputs, opts)

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        return self.reduce_scatter_tensor_coalesced(outputs, inputs, opts)

    def _get_backend(self, device=None):
        """torch 2.x asks a group for its backend per device: this Python
        group is its own (CPU) backend."""
        return self

    supports_coalescing = False

    def _start_coalescing(self, *args):
        pass

    def _end_coalescing(self, *args):
        return None

    def __repr__(self):
        return "<spcoll ProcessGroup %r rank %d of %d>" % (
            self._group.name, self._group.rank, self._group.size)


class _Several(_Done):
    """Several Works as one (the coalesced forms)."""

    def __init__(self, pg, works, outputs):
        super().__init__(pg, outputs)
        self._works = works

    def is_success(self):
        return all(w.is_success() for w in self._works)

    def exception(self):
        for w in self._works:
            if w.exception() is not None:
                return w.exception()
        return None

    def is_completed(self):
        return all(w.is_completed() for w in self._works)

    def wait(self, timeout=None):
        for w in self._works:
            w.wait(timeout)
        return True


_OLD_TORCH = int(torch.__version__.split(".")[0]) < 2
# Where torch 1.x calls C++ that runs this backend's ops and waits on their
# Work, or asks for its future, in C++: DDP's parameter checks and
# _broadcast_coalesced (called from torch.distributed.utils), its reducer
# (from DDP's forward, and from the autograd engine during backward). The
# nearest Python frame is then in one of these modules.
_CPP_WAITERS = ("torch.distributed.utils", "torch.nn.parallel.distributed",
                "torch.autograd")


def _called_through_cpp():
    """Whether the op was called by torch's C++ on behalf of one of
    _CPP_WAITERS (the nearest Python frame outside this module)."""
    import sys
    f = sys._getframe(1)
    while f is not None and f.f_globals.get("__name__") == __name__:
        f = f.f_back
    return f is not None and f.f_globals.get("__name__") in _CPP_WAITERS


def _a2av(in_elems, out_elems):
    from . import _lib
    from .ops import _Op
    a, b = _lib.int64_array(in_elems), _lib.int64_array(out_elems)
    return _Op("all_to_all_v", _lib.lib.spc_op_all_to_all_v, a, b,
               arrays=(a, b))


def _then(call, fn):
    """call with fn(result) run after its own finish."""
    inner = call.finish

    def fin():
        r = inner() if inner else None
        fn(r)
        return r
    call.finish = fin
    return call


# ---- creation ----

def _create(opts, pg_options=None):
    """Backend creator (extended API): join the spcoll group of this torch
    group and wrap it."""
    global _job
    store, rank, size = opts.store, opts.group_rank, opts.group_size
    gid = str(opts.group_id) or "world"
    timeout_s = opts.timeout.total_seconds()
    if _job is None or not dist.is_initialized():
        # the world group (made before torch marks itself initialized):
        # agree on the job id through the store every rank shares
        if rank == 0:
            store.set("spcoll/job", uuid.uuid4().hex[:16])
        _job = store.get("spcoll/job").decode()
    from .c10d import group_name
    ranks = list(getattr(opts, "global_ranks_in_group", None) or range(size))
    return python_group(group_name(_job, gid, ranks), rank, size, timeout_s,
                        store)


def python_group(name, rank, size, timeout_s, store=None):
    """A ProcessGroupSpcoll on spcoll group `name` (joined here)."""
    client = default_client(os.environ.get("SPCOLL_SOCKET"))
    # The daemon enforces the group's timeout too: an op some rank never
    # issues fails on every rank, naming the missing ranks.
    group = client.join(name, size, rank,
                        timeout=timeout_s if timeout_s > 0 else None)
    return ProcessGroupSpcoll(group, timeout_s, store)


def _register():
    """The C++ backend (spcoll.c10d) where its extension loads (torch 2.x,
    built by make), else this Python one."""
    if BACKEND.upper() in getattr(dist.Backend, "_plugins", {}):
        return
    import inspect
    from . import c10d
    kw = {"extended_api": True}
    if "devices" in inspect.signature(dist.Backend.register_backend).parameters:
        kw["devices"] = ["cpu", "cuda"]
    creator = c10d.create if c10d.load() is not None else _create
    dist.Backend.register_backend(BACKEND, creator, **kw)
    if c10d.records_flight():
        _records_itself()


def _records_itself():
    """The C++ backend records its ops in torch's FlightRecorder
    (client/torch/flight.hpp): torch is told, so that it attaches no
    recording hook of its own, which would record each op twice."""
    from torch.distributed import distributed_c10d as c10d_py
    natives = getattr(c10d_py, "_FR_SELF_RECORDING_BACKENDS", None)
    if natives is not None:
        natives.add(BACKEND)


def backend_kind():
    """"c++" when backend "spcoll" is the C++ extension, else "python"
    (spcoll.c10d.why_not() says why)."""
    from . import c10d
    return "c++" if c10d.load() is not None else "python"


def process_group_of(pg):
    """The ProcessGroupSpcoll of a torch process group made with backend
    "spcoll" (torch 2.x may wrap it), a c10d.NativeView for the C++
    backend, or None. Either has .spcoll_group."""
    if isinstance(pg, ProcessGroupSpcoll):
        return pg
    from . import c10d
    view = c10d.native_view(pg)
    if view is not None:
        return view
    get = getattr(pg, "_get_backend", None)
    if get is not None:
        try:
            b = get(torch.device("cpu"))
        except Exception:
            return None
        if isinstance(b, ProcessGroupSpcoll):
            return b
    return None


def group_name(pg):
    """The name of the spcoll group under a torch process group of backend
    "spcoll" (C++ or Python backend)."""
    view = process_group_of(pg)
    if view is None:
        raise ValueError("spcoll: %r is not a process group of backend "
                         "\"spcoll\"" % (pg,))
    if isinstance(view, ProcessGroupSpcoll):
        return view.spcoll_group.name
    return view.name


def empty(shape, dtype=torch.float32, group=None, device=None):
    """A tensor in the memory the backend's daemon reads and writes
    directly: as an op's input it is not staged, as an output
    (all_gather_into_tensor, all_to_all_single, scatter) it is written in
    place, with no copy back. device="cuda" (or "cuda:N"): device memory
    that spcoll allocated (see docs/python.md, CUDA tensors); on the C++
    backend, a tensor of torch's own allocator, which it takes in place."""
    if backend_kind() == "c++":
        from . import c10d
        return c10d.empty(shape, dtype, device)
    return default_client(os.environ.get("SPCOLL_SOCKET")).empty(
        shape, dtype, device=device)


def is_zero_copy(t):
    """Whether the backend takes t (as input or output) without a copy."""
    if backend_kind() == "c++":
        from . import c10d
        return c10d.in_place(t)
    return default_client(os.environ.get("SPCOLL_SOCKET")).is_shared(t)


_register()
