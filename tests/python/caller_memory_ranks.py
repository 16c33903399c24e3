"""Rank body of test_caller_memory: backend "spcoll" (C++) on ordinary
torch CPU tensors, without the allocator. Blocking collectives hand the
tensors to libspclient as they are (spc_buffer_wrap; the other ranks read
them with process_vm_readv): spcoll.c10d.counts() shows them as
wrapped_bytes and no byte staged. Async ops and small tensors stage.
Every result is what gloo gives on the same inputs."""
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
    w = dist.all_reduce(torch.ones(1 << 16), async_op=True)
    w.wait()
    small = torch.ones(16)
    dist.all_reduce(small)
    out["async_staged"] = staged_bytes(before, c10d.counts())
    out["async_wrapped"] = _delta(before, c10d.counts(), "wrapped_bytes")
    if not torch.equal(small, torch.full((16,), float(world))):
        out["bad"].append("small all_reduce: %s" % small[:4])
    dist.destroy_process_group()
    return out
