"""Rank body of test_backend_init: init_process_group("spcoll") through
env:// and tcp:// (file:// is what the other suites use), and two jobs at
once on one daemon, each summing its own values."""
import datetime
import gc
import os
import time

import torch
import torch.distributed as dist

import spcoll  # noqa: F401


def _file_barrier(d, rank, world, tag):
    """Every rank's file in d, then go on (no process group is left)."""
    os.makedirs(d, exist_ok=True)
    open(os.path.join(d, "%s.%d" % (tag, rank)), "w").close()
    while not all(os.path.exists(os.path.join(d, "%s.%d" % (tag, r)))
                  for r in range(world)):
        time.sleep(0.01)


def run(rank, world, socket, method, port, job_value, syncdir):
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
    from spcoll.distributed import group_name
    name = group_name(dist.group.WORLD)
    sub = dist.new_group([0, world - 1])
    sub_name = group_name(sub)
    # rank 0 hosts the tcp store: it must not leave while rank 1 still
    # uses it (torch 1.13's new_group ends with a store-based barrier)
    dist.barrier()
    dist.destroy_process_group()
    del sub
    gc.collect()            # torch 1.13 drops the group; 2.x shut it down
    # the destroyed groups were left: once both ranks are here, their names
    # can be joined again (a rank still held would be a conflict)
    _file_barrier(syncdir, rank, world, "destroyed")
    c = spcoll.default_client()
    again = [c.join(n, 2 if n == name else 2, rank) for n in (name, sub_name)]
    for g in again:
        g.leave()
    return {"sum": t.tolist(), "name": name, "sub": sub_name}
