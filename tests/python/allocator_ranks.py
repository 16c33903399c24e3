"""Rank body of test_cpu_allocator: backend "spcoll" (C++) with the opt-in
CPU allocator. Tensors torch makes after it is on are taken in place
(spcoll.c10d.counts() shows no staged byte) and every op's result is
what gloo gives on the same inputs; a tensor made before it is staged."""
import os

import torch
import torch.distributed as dist

import spcoll  # noqa: F401
from spcoll import c10d


def staged_bytes(before, after):
    """Bytes the C++ backend staged in and out between two counts()."""
    return (after["staged_in_bytes"] - before["staged_in_bytes"] +
            after["staged_out_bytes"] - before["staged_out_bytes"])


def run(rank, world, socket, store):
    os.environ["SPCOLL_SOCKET"] = socket
    os.environ["SPCOLL_CPU_ALLOCATOR"] = "1"
    torch.set_num_threads(1)
    old = torch.full((1000,), float(rank))          # before the allocator
    dist.init_process_group("spcoll", init_method="file://" + store,
                            rank=rank, world_size=world)
    gloo = dist.new_group(backend="gloo")
    out = {"bad": []}
    n = 1 << 16                                      # 256 KiB of float32

    def ops(group):
        g = torch.Generator().manual_seed(7 + rank)
        x = torch.randn(world * n, generator=g)
        r = {}
        a = x.clone()
        dist.all_reduce(a, group=group)
        r["all_reduce"] = a
        y = torch.empty(world * world * n)
        dist.all_gather_into_tensor(y, x, group=group)
        r["all_gather_into_tensor"] = y
        z = torch.empty(n)
        dist.reduce_scatter_tensor(z, x, group=group)
        r["reduce_scatter_tensor"] = z
        t = torch.empty(world * n)
        dist.all_to_all_single(t, x, group=group)
        r["all_to_all_single"] = t
        b = x.clone()
        dist.broadcast(b, 0, group=group)
        r["broadcast"] = b
        w = dist.all_reduce(x.clone(), async_op=True, group=group)
        w.wait()
        return r

    before = c10d.counts()
    mine = ops(None)
    after = c10d.counts()
    ref = ops(gloo)
    for k in mine:
        if not torch.allclose(mine[k], ref[k], rtol=1e-5, atol=1e-5):
            out["bad"].append("%s differs from gloo" % k)
    out["staged_new"] = staged_bytes(before, after)
    out["direct_new"] = after["direct_bytes"] - before["direct_bytes"]
    before = c10d.counts()
    dist.all_reduce(old)
    out["staged_old"] = staged_bytes(before, c10d.counts())
    if not torch.equal(old, torch.full((1000,), float(sum(range(world))))):
        out["bad"].append("all_reduce of a tensor made before: %s" % old[:4])
    dist.destroy_process_group()
    return out
