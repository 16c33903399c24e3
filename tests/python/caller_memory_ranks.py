"""Rank body of test_caller_memory: backend "spcoll" (C++) on ordinary
torch CPU tensors, without the allocator. Blocking collectives hand the
tensors to libspclient as they are (spc_buffer_wrap; the other ranks read
them with process_vm_readv): spcoll.c10d.counts() shows them as
wrapped_bytes and no byte staged. Async ops do the same on the process
group's queue; small tensors stage. Every result is what gloo gives on
the same inputs."""
from datetime import timedelta
import os

import torch
import torch.distributed as dist

import spcoll  # noqa: F401
from spcoll import c10d

from allocator_ranks import staged_bytes


def _delta(before, after, key):
    return after[key] - before[key]


def _ops(rank, world, n, group):
    g = torch.Generator().manual_seed(11 + rank)
    x = torch.randn(world * n, generator=g)
    r = {}
    a = x.clone()
    dist.all_reduce(a, group=group)
    r["all_reduce"] = a
    m = x.clone()
    dist.all_reduce(m, op=dist.ReduceOp.MAX, group=group)
    r["all_reduce_max"] = m
    y = torch.empty(world * world * n)
    dist.all_gather_into_tensor(y, x, group=group)
    r["all_gather_into_tensor"] = y
    z = torch.empty(n)
    dist.reduce_scatter_tensor(z, x, group=group)
    r["reduce_scatter_tensor"] = z
    t = torch.empty(world * n)
    dist.all_to_all_single(t, x, group=group)
    r["all_to_all_single"] = t
    # uneven splits: rank i sends (j + 1) * n // world rows to rank j
    ins = [(j + 1) * n // world for j in range(world)]
    outs = [(rank + 1) * n // world] * world
    u = torch.empty(sum(outs))
    dist.all_to_all_single(u, x[:sum(ins)].contiguous(), outs, ins,
                           group=group)
    r["all_to_all_single_v"] = u
    return r


def _ops_async(rank, world, n, group):
    """_ops' ops all started with async_op=True, then waited for (some
    through their futures): they run in order on the group's queue."""
    g = torch.Generator().manual_seed(11 + rank)
    x = torch.randn(world * n, generator=g)
    a, m = x.clone(), x.clone()
    y, z = torch.empty(world * world * n), torch.empty(n)
    t = torch.empty(world * n)
    ins = [(j + 1) * n // world for j in range(world)]
    outs = [(rank + 1) * n // world] * world
    u = torch.empty(sum(outs))
    xs = x[:sum(ins)].contiguous()
    works = [
        dist.all_reduce(a, group=group, async_op=True),
        dist.all_reduce(m, op=dist.ReduceOp.MAX, group=group, async_op=True),
        dist.all_gather_into_tensor(y, x, group=group, async_op=True),
        dist.reduce_scatter_tensor(z, x, group=group, async_op=True),
        dist.all_to_all_single(t, x, group=group, async_op=True),
        dist.all_to_all_single(u, xs, outs, ins, group=group, async_op=True),
    ]
    torch.futures.wait_all([w.get_future() for w in works[:3]])
    for w in works[3:]:
        w.wait()
    return {"all_reduce": a, "all_reduce_max": m,
            "all_gather_into_tensor": y, "reduce_scatter_tensor": z,
            "all_to_all_single": t, "all_to_all_single_v": u}


def _two_groups_crossed(rank, world, n, other):
    """Async all_reduces on the world group and on `other`, issued in
    opposite orders on even and odd ranks (legal: each group's ranks
    issue its ops in one order). Each group's queue runs its own, and
    neither holds the client while it waits for the other ranks."""
    a = torch.full((n,), float(rank + 1))
    b = torch.full((n,), float(10 * (rank + 1)))
    issue = [(a, None), (b, other)]
    if rank % 2:
        issue.reverse()
    for w in [dist.all_reduce(t, group=g, async_op=True) for t, g in issue]:
        w.wait()
    total = world * (world + 1) / 2
    return torch.all(a == total).item() and torch.all(b == 10 * total).item()


def _in_slot(rank, world, n, group):
    """all_gather_into_tensor with the input in this rank's slot of the
    output (NCCL's in-place rule)."""
    y = torch.zeros(world * n)
    y[rank * n:(rank + 1) * n] = torch.arange(n, dtype=torch.float) + rank
    dist.all_gather_into_tensor(y, y[rank * n:(rank + 1) * n], group=group)
    return y


def run(rank, world, socket, store):
    os.environ["SPCOLL_SOCKET"] = socket
    torch.set_num_threads(1)
    dist.init_process_group("spcoll", init_method="file://" + store,
                            rank=rank, world_size=world)
    gloo = dist.new_group(backend="gloo")
    out = {"bad": []}
    # 256 KiB and 3 MiB of float32 per rank: read in place, and (3 MiB)
    # past the fast path's staging
    for n in (1 << 16, 3 << 18):
        before = c10d.counts()
        mine = _ops(rank, world, n, None)
        after = c10d.counts()
        ref = _ops(rank, world, n, gloo)
        for k in mine:
            if not torch.allclose(mine[k], ref[k], rtol=1e-5, atol=1e-5):
                out["bad"].append("%s (n %d) differs from gloo" % (k, n))
        out.setdefault("staged", []).append(staged_bytes(before, after))
        out.setdefault("wrapped", []).append(
            _delta(before, after, "wrapped_bytes"))
    # the same tensor as input and output of all_to_all_single: staged,
    # as the library takes only apart tensors (gloo given two)
    same = torch.arange(world * (1 << 14), dtype=torch.float) + 1e5 * rank
    ref = torch.empty_like(same)
    dist.all_to_all_single(ref, same.clone(), group=gloo)
    dist.all_to_all_single(same, same)
    if not torch.equal(same, ref):
        out["bad"].append("all_to_all_single in place differs from gloo")
    y = _in_slot(rank, world, 1 << 14, None)
    if not torch.equal(y, _in_slot(rank, world, 1 << 14, gloo)):
        out["bad"].append("in-slot all_gather_into_tensor differs from gloo")
    before = c10d.counts()
    mine = _ops_async(rank, world, 1 << 16, None)
    after = c10d.counts()
    ref = _ops(rank, world, 1 << 16, gloo)
    for k in mine:
        if not torch.allclose(mine[k], ref[k], rtol=1e-5, atol=1e-5):
            out["bad"].append("async %s differs from gloo" % k)
    out["async_staged"] = staged_bytes(before, after)
    out["async_wrapped"] = _delta(before, after, "wrapped_bytes")
    # a blocking op after an async one on the same tensor comes after it
    z = torch.full((1 << 16,), 2.0)
    w = dist.all_reduce(z, async_op=True)
    dist.all_reduce(z)
    w.wait()
    if not torch.equal(z, torch.full((1 << 16,), 2.0 * world * world)):
        out["bad"].append("async then blocking all_reduce: %s" % z[:4])
    other = dist.new_group(timeout=timedelta(seconds=60))
    if not _two_groups_crossed(rank, world, 1 << 16, other):
        out["bad"].append("async ops of two groups issued in crossed orders")
    small = torch.ones(16)
    dist.all_reduce(small)
    if not torch.equal(small, torch.full((16,), float(world))):
        out["bad"].append("small all_reduce: %s" % small[:4])
    dist.destroy_process_group()
    return out
