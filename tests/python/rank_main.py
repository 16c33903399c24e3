"""What each rank process of a check launch runs: a gloo process group for
the references, a spcoll client and group for the code under test, then
every check registered for this world size, in order."""
import os
import traceback

import torch
import torch.distributed as dist

import spcoll
from registry import CHECKS, Ctx, names_for
import checks_core, checks_seq, checks_megatron, checks_batch, checks_train  # noqa: F401 (register)


def run_checks(rank, world, socket, store, tag):
    torch.set_num_threads(1)   # 2..4 ranks share two cores
    dist.init_process_group("gloo", init_method="file://" + store,
                            rank=rank, world_size=world)
    client = spcoll.connect(socket)
    group = client.join("pytest-%s-w%d" % (tag, world), world, rank)
    spcoll.set_sequence_parallel_group(group)
    results = {}
    for name in names_for(world):
        ctx = Ctx(name, rank, world, group)
        try:
            CHECKS[name][0](ctx)
            if ctx.compared == 0:
                ctx.failures.append("the check compared nothing")
        except Exception:
            ctx.failures.append("raised:\n" + traceback.format_exc())
        results[name] = ctx.failures
    dist.destroy_process_group()
    return results
