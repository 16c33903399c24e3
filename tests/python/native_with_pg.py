"""Rank body of test_native_with_pg: the native one-copy wrappers given a
process group made by backend "spcoll", and their async forms."""
import os

import torch
import torch.distributed as dist

import spcoll
import gloo_ref


def run(rank, world, socket, store):
    os.environ["SPCOLL_SOCKET"] = socket
    torch.set_num_threads(1)
    dist.init_process_group("spcoll", init_method="file://" + store,
                            rank=rank, world_size=world)
    gloo = dist.new_group(backend="gloo")
    sub = dist.new_group(list(range(world)))
    out = {}
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(2, 3 * world, 2 * world, 4, generator=g)
    # autograd wrapper on the world process group and on a sub-group
    for name, pg in (("world", dist.group.WORLD), ("sub", sub)):
        xr = x.clone().requires_grad_()
        y = spcoll.all_to_all(xr, pg, scatter_dim=2, gather_dim=1)
        y.square().sum().backward()
        want = gloo_ref.all_to_all(x, 2, 1, group=gloo)
        out[name] = bool(torch.equal(y.detach(), want))
        out[name + "_grad"] = bool(torch.allclose(xr.grad, 2 * x))
    # async native ops: started, Python goes on, then waited
    h1 = spcoll.ops.all_gather(x, sub, dim=1, async_op=True)
    h2 = spcoll.ops.all_reduce(x, sub, async_op=True)
    local = x.sum()                       # compute while the daemon works
    out["gather_async"] = bool(torch.equal(
        h1.wait(), gloo_ref.all_gather(x, 1, group=gloo)))
    out["reduce_async"] = bool(torch.allclose(
        h2.wait(), gloo_ref.all_reduce(x, group=gloo)))
    out["local"] = float(local) == float(x.sum())
    out["completed"] = h1.is_completed() and h2.is_completed()
    dist.destroy_process_group()
    return out
