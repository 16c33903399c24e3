"""Rank body of test_flight_recorder: the C++ backend records its ops in
torch's FlightRecorder itself (client/torch/flight.hpp), as gloo does, and
torch attaches no hook of its own. Returns what the dump of the "spcoll"
recorder says of each op, and how many hooks torch attached. torch 2.x
with the C++ backend: the dump functions are imported where used (torch
1.13 has none)."""
import os
import pickle

import torch
import torch.distributed as dist

import spcoll  # noqa: F401


def _entries():
    from torch._C._distributed_c10d import _dump_fr_trace
    t = pickle.loads(_dump_fr_trace(True, False, False, backend="spcoll"))
    keep = ("profiling_name", "state", "process_group", "input_sizes",
            "output_sizes", "collective_seq_id", "p2p_seq_id", "is_p2p")
    return ([{k: e[k] for k in keep} for e in t.get("entries", [])],
            t["pg_config"], t["pg_status"])


def run(rank, world, socket, store):
    os.environ["SPCOLL_SOCKET"] = socket
    for v in ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"):
        os.environ.pop(v, None)
    torch.set_num_threads(1)
    dist.init_process_group("spcoll", init_method="file://" + store,
                            rank=rank, world_size=world)
    from torch._C._distributed_c10d import _reset_fr_trace
    _reset_fr_trace(backend="spcoll")
    x = torch.ones(4)
    dist.all_reduce(x)
    y = torch.empty(4 * world)
    dist.all_gather_into_tensor(y, x)
    dist.all_reduce(x, async_op=True).wait()
    if rank == 0:
        dist.send(x, 1)
    elif rank == 1:
        dist.recv(x, 0)
    bad = None
    try:  # refused on rank 0 (output too small), failed on the others
        out = torch.empty(4 * world - (1 if rank == 0 else 0))
        dist.all_gather_into_tensor(out, x)
    except (ValueError, RuntimeError) as e:
        bad = str(e)
    sub = dist.new_group(list(range(world)))
    dist.all_reduce(x, group=sub)
    # a group made with torch's recorder off records nothing
    os.environ["TORCH_FR_BUFFER_SIZE"] = "0"
    off = dist.new_group(list(range(world)))
    del os.environ["TORCH_FR_BUFFER_SIZE"]
    dist.all_reduce(x, group=off)
    entries, config, status = _entries()
    hooks = len(dist.distributed_c10d._world.pg_flight_recorder_hooks)
    dist.destroy_process_group()
    return {"entries": entries, "config": config, "status": status,
            "hooks": hooks, "bad": bad}
