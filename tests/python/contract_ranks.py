"""Rank bodies of test_contract: what torch's own parallel APIs (DDP, FSDP1,
FSDP2, DeviceMesh, tensor parallel, coalesced ops, sub-group lifetime,
per-process sub-groups, async overlap, timeouts) expect of a process-group
backend, run on backend "spcoll" and compared with gloo on the same inputs
in the same processes.

run_main() runs every check of CHECKS on one launch (every rank runs them
in the same order); run_timeout() is a second launch whose world group has
a 2 s timeout (a barrier one rank skips). Each check records failures, not
raises, so all ranks keep issuing the same ops; each rank returns
{check name: {"failures": [...], "compared": n, "skip": reason or None,
"notes": [...]}}.

Comparisons: collectives of integer-valued float data are exact whatever
the reduction order (sums of small integers are exact in fp32), so they are
compared with torch.equal. Training (DDP, FSDP, tensor parallel) sums
arbitrary fp32 gradients: with 2 ranks a sum is one addition a+b, which is
commutative and rounded once, so both backends must agree bit for bit
(torch.equal); with 4 ranks gloo's ring allreduce adds the four terms in an
order that depends on the chunk, which need not be spcoll's, so results are
compared with torch.allclose(rtol=1e-5, atol=1e-6) (a dropped or doubled
rank's contribution moves them by orders of magnitude more) and the largest
difference is kept in the notes.
"""
import datetime
import os
import sys
import threading
import time
import traceback

import torch
import torch.distributed as dist
import torch.nn as nn

import spcoll  # noqa: F401 (registers backend "spcoll")

C10D = dist.distributed_c10d
TORCH = torch.__version__.split("+")[0]
TORCH2 = int(TORCH.split(".")[0]) >= 2

# torch's parallel APIs, imported here (in the pytest process) so that the
# forked ranks inherit them; None with the reason where this torch lacks
# one (a check then skips, naming it and the torch version)
try:
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy
    NO_FSDP1 = None
except Exception as e:      # torch 1.13 on Python 3.11: a dataclass error
    FSDP = ModuleWrapPolicy = None
    NO_FSDP1 = "torch %s: torch.distributed.fsdp does not import (%s: %s)" % (
        TORCH, type(e).__name__, str(e)[:160])
try:
    from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
    NO_MESH = None
except Exception as e:
    DeviceMesh = init_device_mesh = None
    NO_MESH = ("torch %s has no DeviceMesh/init_device_mesh (%s)"
               % (TORCH, str(e)[:100]))
try:
    from torch.distributed.fsdp import fully_shard
    NO_FSDP2 = None
except Exception:
    try:
        from torch.distributed._composable.fsdp import fully_shard
        NO_FSDP2 = None
    except Exception as e:
        fully_shard = None
        NO_FSDP2 = "torch %s has no fully_shard (%s)" % (TORCH, str(e)[:100])
if NO_FSDP2 is None and NO_MESH is not None:
    NO_FSDP2 = NO_MESH
if NO_FSDP2 is not None and TORCH.startswith("1.13"):
    NO_FSDP2 = "torch 1.13 has no fully_shard/DeviceMesh"
try:
    from torch.distributed.tensor.parallel import (
        ColwiseParallel, RowwiseParallel, SequenceParallel, parallelize_module)
    try:
        from torch.distributed.tensor import Shard, distribute_tensor
    except ImportError:
        from torch.distributed._tensor import Shard, distribute_tensor
    NO_TP = NO_MESH
except Exception as e:
    NO_TP = ("torch %s has no torch.distributed.tensor.parallel "
             "(ColwiseParallel/RowwiseParallel/SequenceParallel) (%s)"
             % (TORCH, str(e)[:100]))

CHECKS = []
EXACT_RTOL, EXACT_ATOL = 1e-5, 1e-6
STORE_WAIT = datetime.timedelta(seconds=20)   # hang guard, not a timing check
CHECK_GUARD = 30                              # hang guard per check (s)


def check(fn):
    CHECKS.append(fn)
    return fn


class Skip(Exception):
    """This torch lacks the feature a check needs (the message names it).
    Raised before the check issues any op, on every rank alike."""


class Ctx:
    def __init__(self, name, rank, world, gloo, store):
        self.name, self.rank, self.world = name, rank, world
        self.gloo, self.store = gloo, store
        self.failures, self.notes, self.compared = [], [], 0

    def true(self, label, cond):
        self.compared += 1
        if not cond:
            self.failures.append(label)

    def equal(self, label, got, want):
        self.compared += 1
        if not isinstance(got, torch.Tensor) or not isinstance(want, torch.Tensor):
            self.failures.append("%s: not tensors (%r, %r)" % (label, got, want))
        elif got.shape != want.shape or got.dtype != want.dtype:
            self.failures.append("%s: got %s %s, want %s %s" % (
                label, got.dtype, tuple(got.shape), want.dtype,
                tuple(want.shape)))
        elif not torch.equal(got, want):
            d = (got.double() - want.double()).abs().max().item()
            self.failures.append("%s: differ (max |diff| %.3g): got %s, want %s"
                                 % (label, d, got.flatten()[:6].tolist(),
                                    want.flatten()[:6].tolist()))

    def like(self, label, got, want):
        """torch.equal at 2 ranks, allclose(1e-5, 1e-6) at more (see the
        module's docstring)."""
        if self.world == 2:
            return self.equal(label, got, want)
        self.compared += 1
        if got.shape != want.shape or got.dtype != want.dtype:
            self.failures.append("%s: got %s %s, want %s %s" % (
                label, got.dtype, tuple(got.shape), want.dtype,
                tuple(want.shape)))
            return
        d = (got.double() - want.double()).abs().max().item() if got.numel() else 0.0
        self.notes.append("%s max |diff| %.3g" % (label, d))
        if not torch.allclose(got, want, rtol=EXACT_RTOL, atol=EXACT_ATOL):
            self.failures.append("%s: not close (max |diff| %.3g): got %s, want %s"
                                 % (label, d, got.flatten()[:6].tolist(),
                                    want.flatten()[:6].tolist()))

    def part(self, label, fn, *args):
        """fn(*args); an exception is recorded as this part's failure and
        the check goes on with its next part (an op that raises before
        moving anything raises on every rank alike)."""
        try:
            return fn(*args)
        except Exception:
            self.compared += 1
            self.failures.append("%s raised:\n%s" % (label, traceback.format_exc()))
            return None

    def raises(self, label, fn, check_exc):
        try:
            fn()
        except Exception as e:
            self.compared += 1
            why = check_exc(e)
            if why:
                self.failures.append("%s: %s: %s" % (label, why,
                                                     _exc_line(e)))
            return e
        self.true("%s: did not raise" % label, False)
        return None


def _exc_line(e):
    return "%s(%s)" % (type(e).__name__, str(e).replace("\n", " ")[:300])


def ints(shape, seed, dtype=torch.float32):
    """Integer-valued data in [-8, 8): every sum of a few is exact."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-8, 8, shape, generator=g).to(dtype)


def _store_wait(store, key):
    """True once key is set, False after STORE_WAIT (a hang guard)."""
    try:
        store.wait([key], STORE_WAIT)
        return True
    except Exception:
        return False


# ---------------------------------------------------------------- models

def _mlp(seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 16),
                         nn.Tanh(), nn.Linear(16, 4))


def _batches(rank, steps=3):
    """Each rank's own data (data parallel: the ranks' batches differ)."""
    g = torch.Generator().manual_seed(1000 + rank)
    return [(torch.randn(6, 8, generator=g), torch.randn(6, 4, generator=g))
            for _ in range(steps)]


def _train(model, batches, pg):
    """3 SGD steps; per step this rank's loss and the loss averaged over
    the group (an all_reduce on pg)."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses, means = [], []
    for x, y in batches:
        opt.zero_grad()
        loss = (model(x) - y).square().mean()
        loss.backward()
        opt.step()
        losses.append(loss.detach().clone())
        m = loss.detach().clone()
        dist.all_reduce(m, group=pg)
        means.append(m / dist.get_world_size(pg))
    return torch.stack(losses), torch.stack(means)


# ---------------------------------------------------------------- checks

@check
def ddp(c):
    """DistributedDataParallel over the spcoll world group and over gloo:
    each rank builds the model from its own seed, DDP broadcasts rank 0's
    parameters; 3 steps on per-rank data."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    out = {}
    for kind, pg in (("spcoll", dist.group.WORLD), ("gloo", c.gloo)):
        model = DDP(_mlp(100 + c.rank), process_group=pg, bucket_cap_mb=0.0005)
        start = [p.detach().clone() for p in model.module.parameters()]
        for i, (p, q) in enumerate(zip(start, _mlp(100).parameters())):
            c.equal("%s: DDP start param %d is rank 0's (broadcast)" % (kind, i),
                    p, q.detach())
        losses, means = _train(model, _batches(c.rank), pg)
        out[kind] = (losses, means, [p.detach().clone()
                                     for p in model.module.parameters()])
    (ls, ms, ps), (lg, mg, pgl) = out["spcoll"], out["gloo"]
    c.like("losses spcoll vs gloo", ls, lg)
    c.like("mean losses spcoll vs gloo", ms, mg)
    for i, (a, b) in enumerate(zip(ps, pgl)):
        c.like("param %d after 3 steps spcoll vs gloo" % i, a, b)
    c.true("loss went down %s" % ms.tolist(), ms[-1] < ms[0])


@check
def fsdp1(c):
    """FullyShardedDataParallel (FULL_SHARD, every Linear its own unit) on
    CPU: device_id=cpu (torch 2.x FSDP wants it on a host without an
    accelerator). The same seed on every rank (sync_module_states needs a
    GPU). Compares this rank's flat shards and the full parameters
    (summon_full_params)."""
    if NO_FSDP1:
        raise Skip(NO_FSDP1)
    out = {}
    for kind, pg in (("spcoll", dist.group.WORLD), ("gloo", c.gloo)):
        for orig in (False, True):
            model = FSDP(_mlp(7), process_group=pg,
                         auto_wrap_policy=ModuleWrapPolicy({nn.Linear}),
                         device_id=torch.device("cpu"), use_orig_params=orig)
            losses, means = _train(model, _batches(c.rank), pg)
            shards = [p.detach().clone() for p in model.parameters()]
            with FSDP.summon_full_params(model):
                full = [p.detach().clone() for p in model.parameters()]
            out[kind, orig] = (losses, means, shards, full)
    for orig in (False, True):
        tag = "use_orig_params=%s" % orig
        (ls, ms, ss, fs), (lg, mg, sg, fg) = out["spcoll", orig], out["gloo", orig]
        c.like("%s losses spcoll vs gloo" % tag, ls, lg)
        c.like("%s mean losses spcoll vs gloo" % tag, ms, mg)
        c.true("%s: as many shards %d vs %d" % (tag, len(ss), len(sg)),
               len(ss) == len(sg) and len(fs) == len(fg) == 6)
        for i, (a, b) in enumerate(zip(ss, sg)):
            c.like("%s local shard %d spcoll vs gloo" % (tag, i), a, b)
        for i, (a, b) in enumerate(zip(fs, fg)):
            c.like("%s full param %d spcoll vs gloo" % (tag, i), a, b)
        c.true("%s loss went down %s" % (tag, ms.tolist()), ms[-1] < ms[0])


@check
def fsdp2(c):
    """fully_shard on every Linear and the root, over init_device_mesh("cpu",
    (world,)) (backend spcoll) and over DeviceMesh.from_group(gloo)."""
    if NO_FSDP2:
        raise Skip(NO_FSDP2)
    meshes = {"spcoll": init_device_mesh("cpu", (c.world,)),
              "gloo": DeviceMesh.from_group(c.gloo, "cpu")}
    c.true("the spcoll mesh's group is backend spcoll (%s)"
           % dist.get_backend(meshes["spcoll"].get_group()),
           dist.get_backend(meshes["spcoll"].get_group()) == "spcoll")
    out = {}
    for kind, mesh in meshes.items():
        model = _mlp(7)
        for m in model:
            if isinstance(m, nn.Linear):
                fully_shard(m, mesh=mesh)
        fully_shard(model, mesh=mesh)
        losses, means = _train(model, _batches(c.rank), mesh.get_group())
        local = [p.to_local().detach().clone() for p in model.parameters()]
        full = [p.full_tensor().detach().clone() for p in model.parameters()]
        out[kind] = (losses, means, local, full)
    (ls, ms, ss, fs), (lg, mg, sg, fg) = out["spcoll"], out["gloo"]
    c.like("losses spcoll vs gloo", ls, lg)
    c.like("mean losses spcoll vs gloo", ms, mg)
    c.true("6 parameters each", len(ss) == len(sg) == len(fs) == len(fg) == 6)
    for i, (a, b) in enumerate(zip(ss, sg)):
        c.like("local shard %d spcoll vs gloo" % i, a, b)
    for i, (a, b) in enumerate(zip(fs, fg)):
        c.like("full param %d spcoll vs gloo" % i, a, b)
    c.true("loss went down %s" % ms.tolist(), ms[-1] < ms[0])


@check
def ddp_comm_hooks(c):
    """DDP with comm hooks (the Work's future, completed by the backend):
    torch's allreduce_hook and fp16_compress_hook, and a Python hook that
    chains .then() on an async all_reduce's future; 3 steps, spcoll vs
    gloo."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    try:
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    except ImportError as e:
        raise Skip("torch %s has no ddp_comm_hooks (%s)" % (torch.__version__, e))

    def then_hook(pg, bucket):
        t = bucket.buffer()
        fut = dist.all_reduce(t, group=pg, async_op=True).get_future()
        w = dist.get_world_size(pg)
        return fut.then(lambda f: f.value()[0] / w)

    hooks = (("allreduce_hook", default_hooks.allreduce_hook),
             ("fp16_compress_hook", default_hooks.fp16_compress_hook),
             ("then_hook", then_hook))
    for name, hook in hooks:
        out = {}
        for kind, pg in (("spcoll", dist.group.WORLD), ("gloo", c.gloo)):
            model = DDP(_mlp(100 + c.rank), process_group=pg,
                        bucket_cap_mb=0.0005)
            model.register_comm_hook(pg, hook)
            losses, _ = _train(model, _batches(c.rank), pg)
            out[kind] = (losses, [p.detach().clone()
                                  for p in model.module.parameters()])
        (ls, ps), (lg, pgl) = out["spcoll"], out["gloo"]
        if name == "fp16_compress_hook" and c.world > 2:
            # float16 sums of more than two: spcoll adds in fp32 and
            # rounds once, gloo rounds every partial sum to 16 bits
            for i, (a, b) in enumerate(zip(ps, pgl)):
                c.true("%s: param %d spcoll vs gloo within fp16 rounding "
                       "(max |diff| %.3g)" % (name, i, (a - b).abs().max()),
                       torch.allclose(a, b, rtol=1e-3, atol=1e-4))
            continue
        c.like("%s: losses spcoll vs gloo" % name, ls, lg)
        for i, (a, b) in enumerate(zip(ps, pgl)):
            c.like("%s: param %d spcoll vs gloo" % (name, i), a, b)


@check
def functional_collectives(c):
    """torch.distributed._functional_collectives (what DTensor and
    torch.compile use): all_reduce, all_gather_tensor,
    reduce_scatter_tensor, all_to_all_single on the spcoll world group
    against the same on gloo."""
    try:
        import torch.distributed._functional_collectives as funcol
    except ImportError as e:
        raise Skip("torch %s has no _functional_collectives (%s)"
                   % (torch.__version__, e))
    w = c.world
    x = ints((2 * w, 3), 50 + c.rank)
    res = {}
    for kind, pg in (("spcoll", dist.group.WORLD), ("gloo", c.gloo)):
        r = {}
        r["all_reduce"] = funcol.all_reduce(x, "sum", pg)
        r["all_gather_tensor"] = funcol.all_gather_tensor(x, 0, pg)
        r["reduce_scatter_tensor"] = funcol.reduce_scatter_tensor(x, "sum", 0, pg)
        r["all_to_all_single"] = funcol.all_to_all_single(x, None, None, pg)
        res[kind] = {k: funcol.wait_tensor(v) for k, v in r.items()}
    for k in res["spcoll"]:
        c.equal("funcol %s spcoll vs gloo" % k, res["spcoll"][k].clone(),
                res["gloo"][k].clone())


def _group_ops(c, label, g, gl, seed):
    """all_reduce, all_gather_into_tensor, reduce_scatter_tensor,
    all_to_all_single and broadcast on spcoll group g and gloo group gl
    (the same ranks), integer-valued data: exact."""
    n = dist.get_world_size(g)
    c.true("%s: gloo group has the same ranks" % label,
           dist.get_process_group_ranks(g) == dist.get_process_group_ranks(gl))
    me = dist.get_rank(g)
    x = ints((2 * n, 3), seed + 31 * c.rank)
    a, b = x.clone(), x.clone()
    dist.all_reduce(a, group=g)
    dist.all_reduce(b, group=gl)
    c.equal("%s all_reduce vs gloo" % label, a, b)
    a, b = torch.zeros(2 * n * n, 3), torch.zeros(2 * n * n, 3)
    dist.all_gather_into_tensor(a, x, group=g)
    dist.all_gather_into_tensor(b, x, group=gl)
    c.equal("%s all_gather_into_tensor vs gloo" % label, a, b)
    a = torch.zeros(2, 3)
    dist.reduce_scatter_tensor(a, x, group=g)
    b = x.clone()
    dist.all_reduce(b, group=gl)
    c.equal("%s reduce_scatter_tensor vs gloo all_reduce's slice" % label,
            a, b[2 * me:2 * me + 2])
    a, b = torch.zeros_like(x), torch.zeros_like(x)
    dist.all_to_all_single(a, x, group=g)
    dist.all_to_all_single(b, x, group=gl)
    c.equal("%s all_to_all_single vs gloo" % label, a, b)
    src = dist.get_process_group_ranks(g)[-1]
    a, b = x.clone(), x.clone()
    dist.broadcast(a, src, group=g)
    dist.broadcast(b, src, group=gl)
    c.equal("%s broadcast from %d vs gloo" % (label, src), a, b)


@check
def mesh_2d(c):
    """init_device_mesh("cpu", (dp, sp), mesh_dim_names=("dp", "sp")) with
    backend spcoll on both dims ((2, 2) at 4 ranks; (1, 2) and (2, 1) at 2
    ranks): each dim's group has the mesh's ranks and backend spcoll, and a
    collective on it equals gloo's on a group of the same ranks; a DTensor
    sharded on both dims gathers back whole."""
    if NO_MESH:
        raise Skip(NO_MESH)
    shapes = [(2, c.world // 2)] if c.world == 4 else [(1, 2), (2, 1)]
    for shape in shapes:
        mesh = init_device_mesh("cpu", shape, mesh_dim_names=("dp", "sp"))
        grid = mesh.mesh.tolist()
        c.true("mesh %s is %s" % (shape, grid),
               sorted(r for row in grid for r in row) == list(range(c.world)))
        for dim, name in enumerate(("dp", "sp")):
            g = mesh.get_group(name)
            c.true("%s %s group backend %s" % (shape, name, dist.get_backend(g)),
                   dist.get_backend(g) == "spcoll")
            lines = ([[row[j] for row in grid] for j in range(shape[1])]
                     if dim == 0 else [list(row) for row in grid])
            mine = [ln for ln in lines if c.rank in ln][0]
            c.true("%s %s group ranks %s, want %s" % (
                shape, name, dist.get_process_group_ranks(g), mine),
                dist.get_process_group_ranks(g) == mine)
            glos = [dist.new_group(ln, backend="gloo") for ln in lines]
            gl = glos[lines.index(mine)]
            _group_ops(c, "mesh %s dim %s" % (shape, name), g, gl,
                       seed=dim * 100 + shape[0])
        if NO_TP is None:
            full = ints((4, 6), 77)
            d = distribute_tensor(full, mesh, [Shard(0), Shard(1)])
            c.equal("mesh %s DTensor [Shard(0), Shard(1)] full_tensor" % (shape,),
                    d.full_tensor(), full)
            c.equal("mesh %s DTensor sum over both dims" % (shape,),
                    d.sum().full_tensor(), full.sum())


class _Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.w1 = nn.Linear(d, h)
        self.w2 = nn.Linear(h, d)

    def forward(self, x):
        return self.w2(torch.nn.functional.gelu(self.w1(self.norm(x))))


@check
def tensor_parallel(c):
    """parallelize_module: LayerNorm SequenceParallel (sequence dim 1),
    w1 ColwiseParallel(input_layouts=Shard(1)) (all_gather of the
    sequence), w2 RowwiseParallel(output_layouts=Shard(1)) (reduce_scatter
    back to the sequence shard), on a 1-D mesh of the spcoll world and of
    gloo: output, input gradient, parameter gradients (local and full)
    equal; both also match the unsharded block on one process."""
    if NO_TP:
        raise Skip(NO_TP)
    d, h, b, s = 8, 4 * c.world, 2, 2 * c.world
    g = torch.Generator().manual_seed(5)
    x_full = torch.randn(b, s, d, generator=g)
    t_full = torch.randn(b, s, d, generator=g)
    k = s // c.world
    sl = slice(c.rank * k, (c.rank + 1) * k)
    res = {}
    meshes = {"spcoll": init_device_mesh("cpu", (c.world,)),
              "gloo": DeviceMesh.from_group(c.gloo, "cpu")}
    for kind, mesh in meshes.items():
        torch.manual_seed(11)
        blk = _Block(d, h)
        parallelize_module(blk, mesh, {
            "norm": SequenceParallel(),
            "w1": ColwiseParallel(input_layouts=Shard(1)),
            "w2": RowwiseParallel(output_layouts=Shard(1))})
        x = x_full[:, sl].clone().requires_grad_()
        y = blk(x)
        if hasattr(y, "to_local"):
            y = y.to_local()
        (y * t_full[:, sl]).sum().backward()
        names = [n for n, _ in blk.named_parameters()]
        local = [p.grad.to_local().clone() for p in blk.parameters()]
        full = [p.grad.full_tensor().clone() for p in blk.parameters()]
        res[kind] = (y.detach().clone(), x.grad.clone(), local, full, names)
    (ys, xs, ls, fs, names), (yg, xg, lg, fg, _) = res["spcoll"], res["gloo"]
    c.like("forward output spcoll vs gloo", ys, yg)
    c.like("input gradient spcoll vs gloo", xs, xg)
    for n, a, b2 in zip(names, ls, lg):
        c.like("%s grad (local shard) spcoll vs gloo" % n, a, b2)
    for n, a, b2 in zip(names, fs, fg):
        c.like("%s grad (full) spcoll vs gloo" % n, a, b2)
    # the unsharded block on this process: fp32, another summation order
    torch.manual_seed(11)
    ref = _Block(d, h)
    xr = x_full.clone().requires_grad_()
    yr = ref(xr)
    (yr * t_full).sum().backward()
    tol = dict(rtol=1e-4, atol=1e-5)
    c.true("output matches the unsharded block",
           torch.allclose(ys, yr[:, sl].detach(), **tol))
    c.true("input gradient matches the unsharded block",
           torch.allclose(xs, xr.grad[:, sl], **tol))
    for n, a, p in zip(names, fs, ref.parameters()):
        c.true("%s grad matches the unsharded block" % n,
               torch.allclose(a, p.grad, **tol))


@check
def coalesced(c):
    """all_reduce_coalesced, all_gather_coalesced (sync and async), and the
    coalescing manager with all_gather_into_tensor / reduce_scatter_tensor
    / all_reduce inside (FSDP's form), on spcoll; each equals gloo's result
    on the same inputs (gloo's own coalesced form where it has one, else
    its plain ops) and the sum computed here from every rank's data."""
    shapes = [(3,), (2, 4), (5,)]
    n, r = c.world, c.rank

    def mine(salt, rank=r):
        return [ints(s, 1000 * salt + 10 * rank + i) for i, s in enumerate(shapes)]

    def total(salt):
        return [sum(mine(salt, q)[i] for q in range(n)) for i in range(len(shapes))]

    def all_reduce_coalesced(a):
        ts = mine(1)
        w = dist.all_reduce_coalesced(ts, async_op=a)
        if a:
            w.wait()
        us = mine(1)
        dist.all_reduce_coalesced(us, group=c.gloo)
        for i in range(len(shapes)):
            c.equal("all_reduce_coalesced async=%s [%d] vs gloo" % (a, i),
                    ts[i], us[i])
            c.equal("all_reduce_coalesced async=%s [%d] vs sum" % (a, i),
                    ts[i], total(1)[i])

    def all_gather_coalesced(a):
        outs = [[torch.zeros(s) for s in shapes] for _ in range(n)]
        w = dist.all_gather_coalesced(outs, mine(2), async_op=a)
        if a:
            w.wait()
        gouts = [[torch.zeros(s) for s in shapes] for _ in range(n)]
        dist.all_gather_coalesced(gouts, mine(2), group=c.gloo)
        for q in range(n):
            for i in range(len(shapes)):
                c.equal("all_gather_coalesced async=%s rank %d [%d] vs gloo"
                        % (a, q, i), outs[q][i], gouts[q][i])
                c.equal("all_gather_coalesced async=%s rank %d [%d] vs data"
                        % (a, q, i), outs[q][i], mine(2, q)[i])

    for a in (False, True):
        c.part("all_reduce_coalesced async=%s" % a, all_reduce_coalesced, a)
        c.part("all_gather_coalesced async=%s" % a, all_gather_coalesced, a)

    # coalescing manager, FSDP's form: flat inputs, several ops, one wait
    ins = [ints((k,), 3000 + 10 * r + k) for k in (4, 6, 2)]
    rs_in = [ints((n * k,), 4000 + 10 * r + k) for k in (4, 6, 2)]
    ar_in = [ints((k,), 5000 + 10 * r + k) for k in (3, 5)]
    want_ag = [torch.cat([ints((k,), 3000 + 10 * q + k) for q in range(n)])
               for k in (4, 6, 2)]
    want_rs = [sum(ints((n * k,), 4000 + 10 * q + k) for q in range(n))[r * k:(r + 1) * k]
               for k in (4, 6, 2)]
    want_ar = [sum(ints((k,), 5000 + 10 * q + k) for q in range(n)) for k in (3, 5)]

    # gloo's results on the same inputs: its plain ops (reduce_scatter as
    # all_reduce then this rank's slice where gloo has no reduce_scatter)
    g_ag, g_rs, g_ar = [], [], []
    for x in ins:           # 1.13's gloo has no all_gather_into_tensor
        o = [torch.zeros_like(x) for _ in range(n)]
        dist.all_gather(o, x, group=c.gloo)
        g_ag.append(torch.cat(o))
    for x in rs_in:
        k = x.numel() // n
        o = torch.zeros(k)
        try:
            dist.reduce_scatter_tensor(o, x.clone(), group=c.gloo)
        except RuntimeError as e:
            c.notes.append("gloo reduce_scatter_tensor: %s" % _exc_line(e)[:120])
            y = x.clone()
            dist.all_reduce(y, group=c.gloo)
            o = y[r * k:(r + 1) * k].clone()
        g_rs.append(o)
    for x in ar_in:
        y = x.clone()
        dist.all_reduce(y, group=c.gloo)
        g_ar.append(y)

    def run_manager(pg, async_ops, ops):
        outs = []
        if TORCH2:
            with C10D._coalescing_manager(group=pg, async_ops=async_ops) as cm:
                for f in ops:
                    outs.append(f(pg))
            if async_ops:
                cm.wait()
        else:               # 1.13: _coalescing_manager(group, reqs)
            reqs = []
            with C10D._coalescing_manager(pg, reqs):
                for f in ops:
                    o, w = f(pg, True)
                    outs.append(o)
                    reqs.append(w)
            for w in reqs:
                w.wait()
        return outs

    def ag(x):
        def f(pg, a=False):
            o = torch.zeros(n * x.numel())
            w = dist.all_gather_into_tensor(o, x, group=pg, async_op=a)
            return (o, w) if a else o
        return f

    def rs(x):
        def f(pg, a=False):
            o = torch.zeros(x.numel() // n)
            w = dist.reduce_scatter_tensor(o, x.clone(), group=pg, async_op=a)
            return (o, w) if a else o
        return f

    def ar(x):
        def f(pg, a=False):
            y = x.clone()
            w = dist.all_reduce(y, group=pg, async_op=a)
            return (y, w) if a else y
        return f

    def manager(async_ops, what, make, inputs, gloo_res, want):
        tag = "manager async_ops=%s %s" % (async_ops, what)
        got = run_manager(dist.group.WORLD, async_ops, [make(x) for x in inputs])
        c.true("%s: %d outputs" % (tag, len(got)), len(got) == len(inputs))
        for i, (o, gw, w) in enumerate(zip(got, gloo_res, want)):
            c.equal("%s [%d] vs gloo" % (tag, i), o, gw)
            c.equal("%s [%d] vs data" % (tag, i), o, w)

    for async_ops in (False, True):
        for what, make, inputs, gres, want in (
                ("all_gather_into_tensor", ag, ins, g_ag, want_ag),
                ("reduce_scatter_tensor", rs, rs_in, g_rs, want_rs),
                ("all_reduce", ar, ar_in, g_ar, want_ar)):
            c.part("manager async_ops=%s %s" % (async_ops, what), manager,
                   async_ops, what, make, inputs, gres, want)
    # gloo's own coalescing manager, where it has one (torch 2.x): the
    # same results as its plain ops (a reference check of the reference)
    if TORCH2:
        got = run_manager(c.gloo, False, [ag(x) for x in ins])
        for i, (o, gw) in enumerate(zip(got, g_ag)):
            c.equal("gloo's manager all_gather_into_tensor [%d]" % i, o, gw)


@check
def destroy_subgroup(c):
    """A sub-group used, destroyed with destroy_process_group(sub); the
    world group still works; a new sub-group over the same ranks works
    (and one over the other ranks, made meanwhile, is untouched)."""
    pairs = [[0, 1], [2, 3]] if c.world == 4 else [[0, 1]]
    v = float(c.rank + 1)
    for rnd in range(2):
        subs = [dist.new_group(p) for p in pairs]
        gls = [dist.new_group(p, backend="gloo") for p in pairs]
        mine = [i for i, p in enumerate(pairs) if c.rank in p]
        if mine:
            i = mine[0]
            a, b = torch.full((3,), v), torch.full((3,), v)
            dist.all_reduce(a, group=subs[i])
            dist.all_reduce(b, group=gls[i])
            want = torch.full((3,), float(sum(q + 1 for q in pairs[i])))
            c.equal("round %d sub %s sum" % (rnd, pairs[i]), a, want)
            c.equal("round %d sub %s vs gloo" % (rnd, pairs[i]), a, b)
            dist.destroy_process_group(subs[i])
            pg_map = (C10D._world.pg_map if hasattr(C10D, "_world")
                      else C10D._pg_map)
            c.true("round %d: destroyed sub is gone from torch's groups"
                   % rnd, subs[i] not in pg_map)
        a, b = torch.full((2,), v), torch.full((2,), v)
        dist.all_reduce(a)
        dist.all_reduce(b, group=c.gloo)
        c.equal("round %d world after destroy" % rnd, a,
                torch.full((2,), float(sum(range(1, c.world + 1)))))
        c.equal("round %d world after destroy vs gloo" % rnd, a, b)
        x = torch.zeros(c.world)
        dist.all_gather_into_tensor(x, torch.tensor([v]))
        c.equal("round %d world all_gather after destroy" % rnd, x,
                torch.arange(1, c.world + 1, dtype=torch.float32))


@check
def new_subgroups(c):
    """dist.new_subgroups(group_size): every rank gets its own block
    (2 of size 2 at 4 ranks, 2 of size 1 at 2 ranks); all_reduce in it."""
    if not TORCH2:
        raise Skip("torch %s: dist.new_subgroups refuses to run without CUDA "
                   "(\"Subgroups can only be created when CUDA is "
                   "available\")" % TORCH)
    size = 2 if c.world == 4 else 1
    cur, subs = dist.new_subgroups(group_size=size)
    gcur, _ = dist.new_subgroups(group_size=size, backend="gloo")
    want_ranks = [q for q in range(c.world) if q // size == c.rank // size]
    c.true("ranks %s, want %s" % (dist.get_process_group_ranks(cur), want_ranks),
           dist.get_process_group_ranks(cur) == want_ranks)
    c.true("%d sub-groups listed" % len(subs), len(subs) == c.world // size)
    c.true("backend %s" % dist.get_backend(cur), dist.get_backend(cur) == "spcoll")
    a, b = ints((4,), c.rank), ints((4,), c.rank)
    dist.all_reduce(a, group=cur)
    dist.all_reduce(b, group=gcur)
    c.equal("all_reduce in the block", a, sum(ints((4,), q) for q in want_ranks))
    c.equal("all_reduce in the block vs gloo", a, b)
    x = torch.zeros(len(want_ranks) * 2)
    dist.all_gather_into_tensor(x, torch.full((2,), float(c.rank)), group=cur)
    c.equal("all_gather in the block", x,
            torch.tensor([float(q) for q in want_ranks for _ in range(2)]))
    t = torch.ones(1)
    dist.all_reduce(t)
    c.equal("world after", t, torch.full((1,), float(c.world)))


@check
def local_sync_groups(c):
    """dist.new_group(ranks, use_local_synchronization=True) where the
    processes create different groups: {0,1} make [0,1], {2,3} make [2,3]
    at 4 ranks; each rank makes [rank] at 2 ranks. all_reduce in each."""
    import inspect
    if "use_local_synchronization" not in inspect.signature(dist.new_group).parameters:
        raise Skip("torch %s: dist.new_group has no use_local_synchronization"
                   % TORCH)
    mine = [c.rank - c.rank % 2, c.rank - c.rank % 2 + 1] if c.world == 4 else [c.rank]
    for rnd in range(2):
        g = dist.new_group(mine, use_local_synchronization=True)
        gl = dist.new_group(mine, backend="gloo", use_local_synchronization=True)
        c.true("round %d backend %s" % (rnd, dist.get_backend(g)),
               dist.get_backend(g) == "spcoll")
        c.true("round %d ranks %s" % (rnd, dist.get_process_group_ranks(g)),
               dist.get_process_group_ranks(g) == mine)
        a, b = ints((5,), 50 + c.rank + rnd), ints((5,), 50 + c.rank + rnd)
        dist.all_reduce(a, group=g)
        dist.all_reduce(b, group=gl)
        c.equal("round %d sum in %s" % (rnd, mine), a,
                sum(ints((5,), 50 + q + rnd) for q in mine))
        c.equal("round %d sum in %s vs gloo" % (rnd, mine), a, b)
    t = torch.ones(1)
    dist.all_reduce(t)
    c.equal("world after", t, torch.full((1,), float(c.world)))


@check
def async_overlap(c):
    """Rank 0 issues all_reduce(async_op=True) while rank 1 has not issued
    it (rank 1 sleeps 0.3 s and then waits, through the store, until rank
    0 has its Work back: no race): the call returns, is_completed() and the
    future say not done; rank 0 computes; rank 1 then issues and finishes
    its (blocking) all_reduce while rank 0 still has not called wait() (the
    op progresses without it); rank 0 waits and has the sum. Other ranks
    issue at once. No duration is asserted."""
    key = "contract/async/%d/" % c.world
    x = ints((6,), 900 + c.rank)
    want = sum(ints((6,), 900 + q) for q in range(c.world))
    gl = x.clone()
    dist.all_reduce(gl, group=c.gloo)
    c.equal("gloo sum (reference)", gl, want)
    dist.barrier(group=c.gloo)
    t = x.clone()
    if c.rank == 0:
        w = dist.all_reduce(t, async_op=True)
        done_now = w.is_completed()
        fut = w.get_future()
        fut_done = fut.done()
        c.store.set(key + "got_work", "1")
        c.true("is_completed() is False while rank 1 has not issued", not done_now)
        c.true("future not done while rank 1 has not issued", not fut_done)
        a = torch.randn(64, 64, generator=torch.Generator().manual_seed(3))
        m = a
        for _ in range(20):             # compute while the op is in flight
            m = torch.tanh(m @ a)
        c.true("rank 1 finished its all_reduce while rank 0 had not "
               "called wait()", _store_wait(c.store, key + "r1_done"))
        c.true("wait() returns True", w.wait() is True)
        c.true("is_completed() after wait", w.is_completed())
        fut.wait()
        c.true("compute result is finite", bool(torch.isfinite(m).all()))
    elif c.rank == 1:
        time.sleep(0.3)
        c.true("rank 0 got its Work back before rank 1 issued",
               _store_wait(c.store, key + "got_work"))
        dist.all_reduce(t)
        c.store.set(key + "r1_done", "1")
    else:
        dist.all_reduce(t)
    c.equal("sum", t, want)
    c.equal("sum vs gloo", t, gl)


# ---------------------------------------------------------------- launches

def _progress(outdir, rank, text):
    if outdir:
        with open(os.path.join(outdir, "rank%d.progress" % rank), "a") as f:
            f.write(text.rstrip("\n") + "\n")


def _run_one(fn, name, rank, world, gloo, store, outdir):
    """fn(c) on a helper thread under a hang guard (CHECK_GUARD s, many
    times what a check takes; not a timing check): a check that never
    returns (an op whose wait() never comes back) is recorded as hung,
    with its stack, and the next check runs."""
    c = Ctx(name, rank, world, gloo, store)
    _progress(outdir, rank, "start " + name)
    box = {}

    def body():
        try:
            fn(c)
        except Skip as e:
            box["skip"] = str(e)
        except BaseException:
            box["raised"] = traceback.format_exc()
    t = threading.Thread(target=body, name="check-" + name, daemon=True)
    t.start()
    t.join(CHECK_GUARD)
    failures = list(c.failures)
    if t.is_alive():
        stack = "".join(traceback.format_stack(
            sys._current_frames().get(t.ident)))
        failures.append("hung: still running after %d s (a hang guard, not "
                        "a timing check); its stack:\n%s"
                        % (CHECK_GUARD, stack[-2500:]))
    elif "raised" in box:
        failures.append("raised:\n" + box["raised"])
    elif "skip" not in box and c.compared == 0:
        failures.append("compared nothing")
    _progress(outdir, rank, "end %s: %d compared, %d failures%s" % (
        name, c.compared, len(failures),
        "".join("\n  " + f.replace("\n", "\n  ") for f in failures[:5])))
    return {"failures": failures, "compared": c.compared,
            "skip": box.get("skip"), "notes": list(c.notes)}


def run_main(rank, world, socket, store_path, outdir, only=None):
    os.environ["SPCOLL_SOCKET"] = socket
    torch.set_num_threads(1)
    dist.init_process_group("spcoll", init_method="file://" + store_path,
                            rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))
    gloo = dist.new_group(backend="gloo")
    store = C10D._get_default_store()
    res = {"__backend__": _backend_kind()}
    for fn in CHECKS:
        if only is None or fn.__name__ in only:
            res[fn.__name__] = _run_one(fn, fn.__name__, rank, world, gloo,
                                        store, outdir)
    dist.destroy_process_group()
    return res


def _backend_kind():
    try:
        import spcoll.distributed as sd
        return sd.backend_kind()
    except Exception as e:
        return "unknown (%s)" % e


def errors_are_runtime_errors(c):
    """An all_reduce whose sizes disagree between ranks (on a sub-group of
    every rank) fails on every rank with a RuntimeError (subclass)."""
    sub = dist.new_group(list(range(c.world)))
    for a in (False, True):
        def bad():
            w = dist.all_reduce(torch.ones(3 + (c.rank == 0)), group=sub,
                                async_op=a)
            if a:
                w.wait()
        c.raises("mismatched all_reduce async=%s" % a, bad,
                 lambda e: None if isinstance(e, RuntimeError)
                 else "not a RuntimeError subclass")


def barrier_timeout(c):
    """The world group was made with timeout=2 s; the last rank skips a
    barrier: every other rank's barrier raises a RuntimeError (subclass)
    whose message contains "Timed out". The skipping rank stays in the
    group (waits on the store) until the others have seen their error."""
    key = "contract/timeout/%d/" % c.world
    skipper = c.world - 1
    if c.rank == skipper:
        for r in range(c.world - 1):
            c.true("rank %d reported its barrier's outcome" % r,
                   _store_wait(c.store, key + str(r)))
        return

    def why(e):
        bad = []
        if not isinstance(e, RuntimeError):
            bad.append("not a RuntimeError subclass")
        if "Timed out" not in str(e):
            bad.append("no \"Timed out\" in the message")
        return ", ".join(bad) or None
    e = c.raises("barrier rank %d skipped" % skipper, dist.barrier, why)
    c.notes.append("barrier raised %s" % (_exc_line(e) if e else "nothing"))
    c.store.set(key + str(c.rank), "1")


def run_timeout(rank, world, socket, store_path, outdir):
    """Second launch: world group with timeout=timedelta(seconds=2)."""
    os.environ["SPCOLL_SOCKET"] = socket
    torch.set_num_threads(1)
    dist.init_process_group("spcoll", init_method="file://" + store_path,
                            rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=2))
    store = C10D._get_default_store()
    res = {"__backend__": _backend_kind()}
    for fn in (errors_are_runtime_errors, barrier_timeout):
        res[fn.__name__] = _run_one(fn, fn.__name__, rank, world, None,
                                    store, outdir)
    try:
        dist.destroy_process_group()
    except Exception as e:     # after a timeout: not part of the contract
        res["barrier_timeout"]["notes"].append(
            "destroy_process_group after the timeout: " + _exc_line(e))
    return res


TIMEOUT_CHECKS = ["errors_are_runtime_errors", "barrier_timeout"]
