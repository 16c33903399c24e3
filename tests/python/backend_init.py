"""Rank body of test_backend_init: init_process_group("spcoll") through
env:// and tcp:// (file:// is what the other suites use), and two jobs at
once on one daemon, each summing its own values."""
import datetime
import os

import torch
import torch.distributed as dist

import spcoll  # noqa: F401


def run(rank, world, socket, method, port, job_value):
    os.environ["SPCOLL_SOCKET"] = socket
    torch.set_num_threads(1)
    if method == "env":
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                          RANK=str(rank), WORLD_SIZE=str(world))
        dist.init_process_group("spcoll", init_method="env://",
                                timeout=datetime.timedelta(seconds=30))
    else:
        dist.init_process_group("spcoll", rank=rank, world_size=world,
                                init_method="tcp://127.0.0.1:%d" % port,
                                timeout=datetime.timedelta(seconds=30))
    t = torch.full((2,), float(job_value + rank))
    dist.all_reduce(t)
    from spcoll.distributed import process_group_of
    name = process_group_of(dist.group.WORLD).spcoll_group.name
    sub = dist.new_group([0, world - 1])
    sub_name = process_group_of(sub).spcoll_group.name
    # rank 0 hosts the tcp store: it must not leave while rank 1 still
    # uses it (torch 1.13's new_group ends with a store-based barrier)
    dist.barrier()
    dist.destroy_process_group()
    return {"sum": t.tolist(), "name": name, "sub": sub_name}
