"""Checks of CUDA tensors through spcoll, run on every rank of one launch
(same order everywhere; mismatches are recorded, not raised, so all ranks
keep issuing the same ops). Each op on CUDA tensors is compared with the
same op on the same values as CPU tensors (the host path, itself checked
against naive references by the other suites); the values are multiples
of 1/64 in a small range, so sums are exact in any order and every result
must be bitwise equal.

Run only where torch sees a GPU: a real one, or spcsim (tests/gpusim)
under PyPI torch. spcsim runs no kernel of torch's own (its fatbins are
not simulated), so the checks use only copies on the device: data is made
on the CPU and moved with .to(device), results come back with .cpu().
Checks that need a torch kernel (AVG's division, a non-contiguous copy)
report "SKIP: ..." on the simulator; the pytest side turns that into a
skipped test, never a pass.

Returns {check name: [failures] or "SKIP: why"}."""
import hashlib
import os
import traceback

import torch
import torch.distributed as dist

import spcoll
from spcoll import ops

SIM = bool(os.environ.get("SPCSIM_STATE"))
CHECKS = []
BACKEND_CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn


def backend_check(fn):
    BACKEND_CHECKS.append(fn)
    return fn


class NeedsKernels(Exception):
    """This check runs a torch CUDA kernel: real GPUs only."""


def needs_kernels(what):
    if SIM:
        raise NeedsKernels("%s runs a torch CUDA kernel, which spcsim does "
                           "not simulate" % what)


class Ctx:
    def __init__(self, rank, world, dev, group, client):
        self.rank, self.world, self.dev = rank, world, dev
        self.g, self.c = group, client
        self.failures, self.compared, self.name = [], 0, ""

    def data(self, r, shape, dtype=torch.float32, salt=0):
        key = repr((self.name, r, salt, tuple(shape), str(dtype))).encode()
        gen = torch.Generator().manual_seed(
            int.from_bytes(hashlib.sha256(key).digest()[:6], "little"))
        if dtype.is_floating_point:
            return (torch.randint(-256, 256, shape, generator=gen).double()
                    / 64).to(dtype)
        return torch.randint(-20, 20, shape, generator=gen).to(dtype)

    def mine(self, shape, dtype=torch.float32, salt=0):
        return self.data(self.rank, shape, dtype, salt)

    def same(self, label, got, want):
        """got: a CUDA result (must be on this rank's GPU), want: CPU."""
        self.compared += 1
        if got.device != self.dev:
            self.failures.append("%s %s: result on %s, want %s" % (
                self.name, label, got.device, self.dev))
            return
        g = got.cpu()
        if g.shape != want.shape or g.dtype != want.dtype or \
                not torch.equal(g, want):
            self.failures.append("%s %s: got %s %s %s, want %s %s %s" % (
                self.name, label, g.dtype, tuple(g.shape),
                g.flatten()[:6].tolist(), want.dtype, tuple(want.shape),
                want.flatten()[:6].tolist()))

    def both(self, label, fn, x):
        """fn on x as a CUDA tensor and as a CPU tensor: equal results."""
        self.same(label, fn(x.to(self.dev)), fn(x))


# ---- every native op --------------------------------------------------------

@check
def native_copy_ops(c):
    w, r = c.world, c.rank
    for dt in (torch.float32, torch.bfloat16, torch.int64):
        c.both("split %s" % dt, lambda t: ops.split(t, c.g, dim=1), c.data(0, [3, 2 * w + 1, 4], dt))
        sizes = [2 + j for j in range(w)]
        xg = c.mine([sizes[r], 5], dt)
        c.both("gather %s" % dt, lambda t: ops.all_gather(t, c.g, dim=0, sizes=sizes), xg)
        c.both("all_to_all %s" % dt, lambda t: ops.all_to_all(t, c.g, scatter_dim=2, gather_dim=1), c.mine([2, 3, 2 * w, 2], dt))
    ins = [1 + (r + j) % 3 for j in range(w)]
    outs = [1 + (j + r) % 3 for j in range(w)]
    xv = c.mine([sum(ins), 3])
    c.both("all_to_all_v", lambda t: ops.all_to_all_v(t, c.g, ins, outs), xv)
    xz = c.mine([4 * w, 3])
    c.both("zigzag_split", lambda t: ops.zigzag_split(t, c.g, 0), c.data(0, [4 * w, 3]))
    c.both("zigzag_gather", lambda t: ops.zigzag_gather(t, c.g, 0), xz[:2 * 2])
    lens = [w + 1, 2 * w - 1]
    xp = c.data(0, [sum(lens), 2])
    c.both("packed_split", lambda t: ops.packed_split(t, c.g, lens, 0), xp)
    mine = ops.packed_split(xp, c.g, lens, 0)
    c.both("packed_gather", lambda t: ops.packed_gather(t, c.g, lens, 0), mine)


@check
def native_reductions(c):
    for dt in (torch.float32, torch.float16, torch.int32):
        x = c.mine([4, 7], dt)
        for op in ("sum", "max", "min"):
            c.both("all_reduce %s %s" % (op, dt),
                   lambda t: ops.all_reduce(t, c.g, op), x)
        c.both("reduce_scatter %s" % dt,
               lambda t: ops.reduce_scatter(t, c.g, 0), c.mine([2 * c.world + 1, 3], dt))


@check
def zero_copy_in_spcoll_device_memory(c):
    x = c.c.empty([6, 4], torch.float32, device=c.dev)
    x.copy_(c.mine([6, 4]).to(c.dev))
    before = c.c.staging_stats()
    y = ops.all_gather(x, c.g, dim=0)
    if c.c.staging_stats() != before:
        c.failures.append("an input in spcoll device memory was staged")
    if not c.c.is_shared(y):
        c.failures.append("an op's output is not in spcoll device memory")
    want = ops.all_gather(c.mine([6, 4]), c.g, dim=0)
    c.same("gather of spcoll memory", y, want)


@check
def foreign_tensor_is_staged(c):
    x = c.mine([5, 3]).to(c.dev)         # torch's caching allocator
    n0 = c.c.staging_stats()[0]
    y = ops.all_reduce(x, c.g)
    if c.c.staging_stats()[0] != n0 + 1 or c.c.is_shared(x):
        c.failures.append("a caching-allocator tensor was not staged once")
    c.same("all_reduce of a torch tensor", y, ops.all_reduce(c.mine([5, 3]), c.g))


@check
def non_contiguous_input(c):
    needs_kernels("a non-contiguous device copy")
    x = c.mine([4, 6])
    c.both("gather of a transposed tensor",
           lambda t: ops.all_gather(t.t(), c.g, dim=0), x)


# ---- stream order -------------------------------------------------------------

BIG = 1 << 20     # elements: enough work in flight that a missing wait shows


@check
def stream_order_on_a_side_stream(c):
    """Input written by an async copy on a side stream, the op issued on
    that stream, the result copied on it: correct only if the daemon waits
    for the stream and the stream for the daemon (no host sync here).
    Three rounds: the first ones may allocate (and free) spcoll arenas,
    and cudaFree synchronizes the device, which would hide a missing
    wait."""
    s = torch.cuda.Stream(device=c.dev)
    for i in range(3):
        host = c.mine([BIG], salt=i).pin_memory()
        with torch.cuda.stream(s):
            x = host.to(c.dev, non_blocking=True)
            y = ops.all_reduce(x, c.g)
            z = torch.empty_like(y)
            z.copy_(y)                          # after the daemon's write
            out = z.to("cpu", non_blocking=True)
        s.synchronize()
        want = ops.all_reduce(c.mine([BIG], salt=i), c.g)
        c.compared += 1
        if not torch.equal(out, want):
            c.failures.append("side-stream all_reduce round %d: got %s "
                              "want %s" % (i, out[:4].tolist(),
                                           want[:4].tolist()))
        del x, y, z, out            # the next round reuses the blocks


@check
def async_handle_waits_on_stream(c):
    s = torch.cuda.Stream(device=c.dev)
    host = c.mine([BIG, 2]).pin_memory()
    with torch.cuda.stream(s):
        x = host.to(c.dev, non_blocking=True)
        h = ops.all_gather(x, c.g, dim=0, async_op=True)
        del x                                # kept alive by the handle
        y = h.wait()
        out = y.to("cpu", non_blocking=True)
    s.synchronize()
    want = ops.all_gather(c.mine([BIG, 2]), c.g, dim=0)
    c.compared += 1
    if not torch.equal(out, want):
        c.failures.append("async all_gather on a side stream went wrong")


# ---- torch's allocator frees its segments whenever it likes ------------------

@check
def empty_cache_after_ops(c):
    for i in range(3):
        x = c.mine([1 << 16], salt=i).to(c.dev)
        y = ops.all_reduce(x, c.g)
        c.same("round %d" % i, y, ops.all_reduce(c.mine([1 << 16], salt=i), c.g))
        del x, y
        torch.cuda.empty_cache()    # cudaFree of torch's segments


@check
def empty_cache_while_op_in_flight(c):
    x = c.mine([1 << 16]).to(c.dev)
    h = ops.all_gather(x, c.g, dim=0, async_op=True)
    del x
    torch.cuda.empty_cache()        # the input's segment goes back to CUDA
    y = h.wait()
    c.same("all_gather across empty_cache", y,
           ops.all_gather(c.mine([1 << 16]), c.g, dim=0))


@check
def trim_returns_device_arenas(c):
    t = c.c.empty([1 << 10], torch.float32, device=c.dev)
    del t
    c.c.trim()
    left = [a for a in c.c.pool._arenas if a.device >= 0 and a.live == 0]
    c.compared += 1
    if left:
        c.failures.append("trim kept %d empty device arena(s)" % len(left))


# ---- torch.distributed backend "spcoll" on CUDA tensors ----------------------

R = dist.ReduceOp


_bsame = Ctx.same


@backend_check
def backend_all_reduce(c):
    for op in (R.SUM, R.MAX, R.MIN):
        t = c.mine([5, 3]).to(c.dev)
        dist.all_reduce(t, op)
        ref = c.mine([5, 3])
        dist.all_reduce(ref, op)
        _bsame(c, "all_reduce %s" % op, t, ref)
    t = c.mine([9]).to(c.dev)
    w = dist.all_reduce(t, async_op=True)
    w.wait()
    ref = c.mine([9])
    dist.all_reduce(ref)
    _bsame(c, "async all_reduce", t, ref)


@backend_check
def backend_avg(c):
    needs_kernels("ReduceOp.AVG (a division on the device)")
    t = c.mine([5]).to(c.dev)
    dist.all_reduce(t, R.AVG)
    ref = c.mine([5])
    dist.all_reduce(ref, R.AVG)
    _bsame(c, "all_reduce AVG", t, ref)


@backend_check
def backend_gathers_and_scatters(c):
    w = c.world
    x = c.mine([4, 3])
    out = torch.empty([4 * w, 3], device=c.dev)
    dist.all_gather_into_tensor(out, x.to(c.dev))
    ref = torch.empty([4 * w, 3])
    dist.all_gather_into_tensor(ref, x)
    _bsame(c, "all_gather_into_tensor", out, ref)
    outs = [torch.empty([4, 3], device=c.dev) for _ in range(w)]
    dist.all_gather(outs, x.to(c.dev))
    refs = [torch.empty([4, 3]) for _ in range(w)]
    dist.all_gather(refs, x)
    for j in range(w):
        _bsame(c, "all_gather[%d]" % j, outs[j], refs[j])
    big = c.mine([2 * w, 3])
    o = torch.empty([2, 3], device=c.dev)
    dist.reduce_scatter_tensor(o, big.to(c.dev))
    ro = torch.empty([2, 3])
    dist.reduce_scatter_tensor(ro, big)
    _bsame(c, "reduce_scatter_tensor", o, ro)
    b = c.mine([6]).to(c.dev)
    dist.broadcast(b, 1 % w)
    rb = c.mine([6])
    dist.broadcast(rb, 1 % w)
    _bsame(c, "broadcast", b, rb)
    a = c.mine([2 * w, 2])
    ao = torch.empty([2 * w, 2], device=c.dev)
    dist.all_to_all_single(ao, a.to(c.dev))
    ar = torch.empty([2 * w, 2])
    dist.all_to_all_single(ar, a)
    _bsame(c, "all_to_all_single", ao, ar)
    dist.barrier()


@backend_check
def backend_refuses_mixed_host_and_device(c):
    c.compared += 1
    try:
        outs = [torch.empty([2]) for _ in range(c.world)]
        dist.all_gather(outs, c.mine([2]).to(c.dev))
        c.failures.append("host outputs for a CUDA input were accepted")
    except (ValueError, RuntimeError) as e:
        if "mix host and device" not in str(e) and \
                "must all be on the CPU or all on one GPU" not in str(e):
            c.failures.append("unclear error: %s" % e)


@backend_check
def backend_zero_copy_output(c):
    import spcoll.distributed as sd
    w = c.world
    out = sd.empty([3 * w], torch.float32, device=c.dev)
    if not sd.is_zero_copy(out):
        c.failures.append("spcoll.distributed.empty(device=...) is not "
                          "zero copy")
    dist.all_gather_into_tensor(out, c.mine([3]).to(c.dev))
    ref = torch.empty([3 * w])
    dist.all_gather_into_tensor(ref, c.mine([3]))
    _bsame(c, "all_gather_into_tensor into spcoll memory", out, ref)


def _cxx_counts():
    """The C++ backend's counts (spcoll.c10d.counts()); NeedsKernels-like
    skip when the Python backend serves."""
    import spcoll.distributed as sd
    if sd.backend_kind() != "c++":
        raise NeedsKernels("the C++ backend is not the one registered (%s)"
                           % sd.backend_kind())
    from spcoll import c10d
    return c10d.counts()


def _delta(before, after):
    return {k: after[k] - before[k] for k in after}


@backend_check
def backend_ordinary_cuda_tensors_in_place(c):
    """Tensors from torch's caching allocator go in place: nothing staged,
    every operand byte counted as taken directly (the CPU references are
    computed after the count)."""
    w, cuda = c.world, c.dev
    before = _cxx_counts()
    t = c.mine([1 << 12]).to(cuda)
    dist.all_reduce(t)
    x = c.mine([256, 3])
    out = torch.empty([256 * w, 3], device=cuda)
    dist.all_gather_into_tensor(out, x.to(cuda))
    big = c.mine([64 * w, 5])
    o = torch.empty([64, 5], device=cuda)
    dist.reduce_scatter_tensor(o, big.to(cuda))
    a = c.mine([8 * w, 16])
    ao = torch.empty([8 * w, 16], device=cuda)
    dist.all_to_all_single(ao, a.to(cuda))
    b = c.mine([100]).to(cuda)
    dist.broadcast(b, w - 1)
    d = _delta(before, _cxx_counts())
    ref = c.mine([1 << 12])
    dist.all_reduce(ref)
    _bsame(c, "all_reduce", t, ref)
    rout = torch.empty([256 * w, 3])
    dist.all_gather_into_tensor(rout, x)
    _bsame(c, "all_gather_into_tensor", out, rout)
    ro = torch.empty([64, 5])
    dist.reduce_scatter_tensor(ro, big)
    _bsame(c, "reduce_scatter_tensor", o, ro)
    ar = torch.empty([8 * w, 16])
    dist.all_to_all_single(ar, a)
    _bsame(c, "all_to_all_single", ao, ar)
    rb = c.mine([100])
    dist.broadcast(rb, w - 1)
    _bsame(c, "broadcast", b, rb)
    want = (4 * (1 << 12) + 4 * 256 * 3 * (w + 1) + 4 * 64 * 5 * (w + 1) +
            2 * 4 * 8 * w * 16 + 4 * 100)
    if d["staged_in_bytes"] or d["staged_out_bytes"]:
        c.failures.append("ordinary CUDA tensors were staged: %s" % d)
    if d["direct_bytes"] != want:
        c.failures.append("%d bytes taken in place, want %d: %s"
                          % (d["direct_bytes"], want, d))
    if _cxx_counts()["cuda_segments"] < 1:
        c.failures.append("no segment of torch's allocator registered: %s"
                          % d)


def _empty_cache_rounds(c, rounds, elems):
    """Rounds in which torch gives memory the daemon registered back to
    CUDA (a segment's cudaFree, or an expandable segment's unmap) while
    an async op on other memory runs: it is released first, the op
    completes right."""
    w = c.world
    for i in range(rounds):
        before = _cxx_counts()
        old = c.mine([elems], salt=i).to(c.dev)     # memory of its own
        dist.all_reduce(old)
        x = c.mine([1 << 16], salt=i).to(c.dev)
        out = torch.empty([w << 16], device=c.dev)
        h = dist.all_gather_into_tensor(out, x, async_op=True)
        del old
        torch.cuda.empty_cache()          # old's memory back to CUDA
        h.wait()
        ref = torch.empty([w << 16])
        dist.all_gather_into_tensor(ref, c.mine([1 << 16], salt=i))
        _bsame(c, "all_gather across empty_cache, round %d" % i, out, ref)
        d = _delta(before, _cxx_counts())
        if d["cuda_segments_released"] < 1:
            c.failures.append("round %d: nothing released before "
                              "empty_cache gave it back: %s" % (i, d))
        del x, out, h


@backend_check
def backend_empty_cache_with_ops_in_flight(c):
    """torch gives registered segments back to CUDA while an async op
    runs: each is released first (the simulator fails a cudaFree of memory
    the daemon still maps), the op completes right."""
    _empty_cache_rounds(c, 3, 3 << 20)


def _pool_ops(c, pool):
    """all_reduce and all_gather_into_tensor on tensors allocated in pool
    (no scratch), then all_gather into a list of pool tensors outside
    use_mem_pool (it needs scratch: from the pool under
    SPCOLL_CUDA_DIRECT=0, else from torch's allocator), each compared with the
    same op on CPU tensors. The counts' change over the first two, and
    over all three."""
    w, cuda = c.world, c.dev
    before = _cxx_counts()
    with torch.cuda.use_mem_pool(pool):
        t = c.mine([1 << 12]).to(cuda)
        x = c.mine([256, 3]).to(cuda)
        out = torch.empty([256 * w, 3], device=cuda)
        parts = [torch.empty([100], device=cuda) for _ in range(w)]
        piece = c.mine([100], salt=1).to(cuda)
    dist.all_reduce(t)
    dist.all_gather_into_tensor(out, x)
    d_first = _delta(before, _cxx_counts())
    dist.all_gather(parts, piece)
    d = _delta(before, _cxx_counts())
    ref = c.mine([1 << 12])
    dist.all_reduce(ref)
    _bsame(c, "all_reduce in the pool", t, ref)
    rout = torch.empty([256 * w, 3])
    dist.all_gather_into_tensor(rout, c.mine([256, 3]))
    _bsame(c, "all_gather_into_tensor in the pool", out, rout)
    rparts = [torch.empty([100]) for _ in range(w)]
    dist.all_gather(rparts, c.mine([100], salt=1))
    for j in range(w):
        _bsame(c, "all_gather piece %d into the pool" % j, parts[j],
               rparts[j])
    return d_first, d


@backend_check
def backend_mem_pool_tensors_in_place(c):
    """Tensors of spcoll's MemPool (spcoll.c10d.mem_pool) go in place
    without a registration of torch's segments: nothing staged, no
    segment registered, the pool's own allocations counted."""
    from spcoll import c10d
    _cxx_counts()
    pool = c10d.mem_pool(c.dev)
    if c10d.mem_pool(c.dev) is not pool:
        c.failures.append("mem_pool made a second pool for %s" % c.dev)
    d_first, d = _pool_ops(c, pool)
    if d_first["cuda_segments"]:
        c.failures.append("pool tensors' memory was registered as torch's "
                          "segments: %s" % d_first)
    if d["staged_in_bytes"]:
        c.failures.append("pool tensors were staged: %s" % d)
    if c10d.counts()["cuda_pool_allocs"] < 1:
        c.failures.append("the pool allocated nothing through spcoll: %s"
                          % c10d.counts())


def _expandable_ordinary(ctx):
    """Ordinary tensors of an expandable-segments allocator (cuMem memory,
    sent to the daemon as file descriptors) go in place, bitwise right:
    nothing staged, the runs of mappings registered; one of them spans two
    of the allocator's 20 MiB mappings."""
    w, dev = ctx.world, ctx.dev
    before = _cxx_counts()
    t = ctx.mine([1 << 12]).to(dev)
    dist.all_reduce(t)
    big = ctx.mine([6 << 20]).to(dev)          # 24 MiB: two mappings
    bout = torch.empty([w * (6 << 20)], device=dev)
    dist.all_gather_into_tensor(bout, big)
    a = ctx.mine([8 * w, 16]).to(dev)
    ao = torch.empty_like(a)
    dist.all_to_all_single(ao, a)
    d = _delta(before, _cxx_counts())
    ref = ctx.mine([1 << 12])
    dist.all_reduce(ref)
    _bsame(ctx, "all_reduce", t, ref)
    rb = torch.empty([w * (6 << 20)])
    dist.all_gather_into_tensor(rb, ctx.mine([6 << 20]))
    _bsame(ctx, "all_gather_into_tensor over two mappings", bout, rb)
    ra = torch.empty([8 * w, 16])
    dist.all_to_all_single(ra, ctx.mine([8 * w, 16]))
    _bsame(ctx, "all_to_all_single", ao, ra)
    if d["staged_in_bytes"] or d["staged_out_bytes"]:
        ctx.failures.append("expandable-segment tensors were staged: %s" % d)
    if d["cuda_segments"] < 1:
        ctx.failures.append("no run of cuMem mappings registered: %s" % d)


def expandable_rank(rank, world, sock, store):
    """A process whose allocator uses expandable segments: its ordinary
    CUDA tensors go through the C++ backend in place, also across
    empty_cache; spcoll's pool tensors too."""
    torch.set_num_threads(1)
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    torch.cuda.memory._set_allocator_settings("expandable_segments:True")
    os.environ["SPCOLL_SOCKET"] = sock
    dist.init_process_group("spcoll", init_method="file://" + store,
                            rank=rank, world_size=world)
    ctx = Ctx(rank, world, dev, None, None)
    ctx.name = "expandable"
    try:
        from spcoll import c10d
        _expandable_ordinary(ctx)
        _empty_cache_rounds(ctx, 2, 6 << 20)    # unmaps whole mappings
        _, d = _pool_ops(ctx, c10d.mem_pool(dev))
        if d["staged_in_bytes"]:
            ctx.failures.append("pool tensors were staged: %s" % d)
        e = c10d.empty([64], device=dev)
        if not c10d.in_place(e):
            ctx.failures.append("spcoll.c10d.empty(device=cuda) is not in "
                                "place under expandable segments")
    except Exception:
        ctx.failures.append("raised:\n" + traceback.format_exc())
    dist.destroy_process_group()
    return {"failures": ctx.failures, "compared": ctx.compared}


def disagree_rank(rank, world, sock, store):
    """Rank 1 keeps torch's allocator out of place (SPCOLL_CUDA_DIRECT=0),
    rank 0 does not: for ordinary CUDA tensors rank 0 alone could go in
    place, rank 1 only through the Python backend's device path. The
    ranks agree on one path per op, so each op completes, bitwise right,
    well inside the 30 s timeout (without the agreement each waited in its
    own group until it)."""
    import datetime
    torch.set_num_threads(1)
    if rank == 1:
        os.environ["SPCOLL_CUDA_DIRECT"] = "0"
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    os.environ["SPCOLL_SOCKET"] = sock
    dist.init_process_group("spcoll", init_method="file://" + store,
                            rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=30))
    ctx = Ctx(rank, world, dev, None, None)
    ctx.name = "disagree"
    try:
        before = _cxx_counts()
        for i in range(3):
            t = ctx.mine([1 << 10], salt=i).to(dev)
            dist.all_reduce(t)
            ref = ctx.mine([1 << 10], salt=i)
            dist.all_reduce(ref)
            _bsame(ctx, "all_reduce %d" % i, t, ref)
        d = _delta(before, _cxx_counts())
        if d["cuda_segments"]:
            ctx.failures.append("a segment of torch's allocator was "
                                "registered: %s" % d)
    except Exception:
        ctx.failures.append("raised:\n" + traceback.format_exc())
    dist.destroy_process_group()
    return {"failures": ctx.failures, "compared": ctx.compared}


def _run_checks(ctx, checks, only):
    results = {}
    for fn in checks:
        if only is not None and fn.__name__ not in only:
            continue
        ctx.failures, ctx.compared, ctx.name = [], 0, fn.__name__
        try:
            fn(ctx)
            if ctx.compared == 0:
                ctx.failures.append("compared nothing")
            results[fn.__name__] = ctx.failures
        except NeedsKernels as e:
            results[fn.__name__] = "SKIP: %s" % e
        except Exception:
            results[fn.__name__] = ctx.failures + [
                "raised:\n" + traceback.format_exc()]
    return results


STREAM_CHECKS = ("stream_order_on_a_side_stream",
                 "async_handle_waits_on_stream")


class _Unordered:
    """libspclient as the Python package sees it, except that the daemon
    is ordered after a stream of its own instead of the caller's: the
    stream checks must then fail (the control that shows they can)."""

    def __init__(self, lib, dev):
        self._lib, self._stream = lib, torch.cuda.Stream(device=dev)

    def _other(self):
        import ctypes
        return ctypes.c_void_p(self._stream.cuda_stream)

    def __getattr__(self, name):
        f = getattr(self._lib, name)
        if name == "spc_start_on_stream":
            return lambda g, op, i, o, s, r: f(g, op, i, o, self._other(), r)
        if name == "spc_run_on_stream":
            return lambda g, op, i, o, s: f(g, op, i, o, self._other())
        return f


def run(rank, world, sock, placement, tag, store=None):
    """placement: "one_gpu" (every rank on cuda:0, the daemon's CUDA
    mover), "gpu_per_rank" (rank r on cuda:r, NCCL) or "unordered" (as
    one_gpu, the stream checks only, with the daemon ordered after the
    wrong stream: a negative control). store: a file path: then the
    torch backend checks run too."""
    torch.set_num_threads(1)
    dev = torch.device("cuda", rank if placement == "gpu_per_rank" else 0)
    torch.cuda.set_device(dev)
    only = None
    if placement == "unordered":
        from spcoll import _inflight
        _inflight.lib = ops.lib = _Unordered(ops.lib, dev)
        only = STREAM_CHECKS
    client = spcoll.connect(sock)
    g = client.join("cuda-%s-%s" % (placement, tag), world, rank)
    ctx = Ctx(rank, world, dev, g, client)
    results = _run_checks(ctx, CHECKS, only)
    if store is not None:
        os.environ["SPCOLL_SOCKET"] = sock
        dist.init_process_group("spcoll", init_method="file://" + store,
                                rank=rank, world_size=world)
        results.update(_run_checks(ctx, BACKEND_CHECKS, None))
        dist.destroy_process_group()
    torch.cuda.synchronize()
    g.leave()
    client.close()
    return results


# ---- a rank that dies with its op queued on its stream ----------------------

def dead_client_rank(rank, world, sock):
    """Rank 0 queues work on its stream ahead of an async all_reduce (so
    its start event is recorded only after them) and dies before its
    stream gets there; rank 1 must hear a timeout, not wait for ever."""
    import time
    from spcoll import ops
    torch.cuda.set_device(0)
    c = spcoll.connect(sock)
    g = c.join("dead-client", world, rank, timeout=3.0)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        x = torch.ones(1 << 16).to("cuda:0")  # a copy: no torch kernel
        # A first op makes the staging arena: allocating one waits for
        # the device, which would run the queue below before the op.
        ops.all_reduce(x, g)
        if rank == 0:
            host = torch.ones(1 << 16).pin_memory()
            for _ in range(40):     # slowed streams: seconds of queued work
                x.copy_(host, non_blocking=True)
        h = ops.all_reduce(x, g, async_op=True)
        if rank == 0:
            time.sleep(0.2)
            os._exit(3)
        try:
            h.wait()
            # Queue and return: wait() only ordered the stream; the failed
            # op releases it, and its status comes with the answer.
            torch.cuda.current_stream().synchronize()
            c.async_error(wait=True)
            return {"res": "completed"}
        except Exception as e:      # the daemon's timeout, as RuntimeError
            return {"res": "raised", "msg": str(e)}
