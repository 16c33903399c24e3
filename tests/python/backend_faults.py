"""Faults under backend "spcoll": a rank killed in the middle of a job and
a rank that never issues an op (timeout). The others must get an error
(RuntimeError-family, spcoll's message), never hang: launch's guard kills
a hung rank and the test then fails."""
import datetime
import os
import time

import torch
import torch.distributed as dist

import spcoll  # noqa: F401


def _init(rank, world, socket, store, timeout=None):
    os.environ["SPCOLL_SOCKET"] = socket
    torch.set_num_threads(1)
    kw = {"timeout": datetime.timedelta(seconds=timeout)} if timeout else {}
    dist.init_process_group("spcoll", init_method="file://" + store,
                            rank=rank, world_size=world, **kw)


def _error_of(fn):
    """What fn raised (a RuntimeError) as text; None when it returned."""
    try:
        fn()
    except RuntimeError as e:
        return str(e)
    return None


def killed_rank(rank, world, socket, store):
    """The last rank dies after one all_reduce; the others' next ops fail."""
    _init(rank, world, socket, store)
    t = torch.ones(4)
    dist.all_reduce(t)
    if rank == world - 1:
        os._exit(0)             # no goodbye: the daemon sees the socket close
    out = {"first": t.tolist(), "errors": []}
    for async_op in (False, True):
        try:
            w = dist.all_reduce(torch.ones(4), async_op=async_op)
            if async_op:
                w.wait()
            out["errors"].append(None)
        except RuntimeError as e:
            out["errors"].append(str(e))
    return out


def timeout(rank, world, socket, store):
    """Rank 1 skips an op: rank 0 times out (3 s) and breaks the group, so
    rank 1's next op fails too; neither hangs."""
    _init(rank, world, socket, store, timeout=3)
    t0 = time.monotonic()
    if rank == 0:
        out = {"error": _error_of(lambda: dist.all_reduce(torch.ones(2)))}
    else:
        time.sleep(4)
        out = {"error": _error_of(lambda: dist.all_reduce(torch.ones(3)))}
    out["seconds"] = time.monotonic() - t0
    out["after"] = _error_of(lambda: dist.all_reduce(torch.ones(2)))
    return out


def wait_gives_up(rank, world, socket, store):
    """Rank 0 starts an async all_reduce that rank 1 has not issued and
    waits for it with a bound of its own (2 s; the group's timeout is
    30 s): wait raises then, not when the op ends, and the group refuses
    later ops. Rank 1 issues the op only after rank 0's wait gave up, so
    a wait that waited for the op would wait out the group's timeout.
    Rank 1's op then completes (with the C++ backend the op was still
    running on rank 0's queue) or fails (rank 0 left); its next one fails:
    rank 0 has left the group."""
    _init(rank, world, socket, store, timeout=30)
    kv = dist.distributed_c10d._get_default_store()
    if rank == 0:
        w = dist.all_reduce(torch.ones(1 << 16), async_op=True)
        t0 = time.monotonic()
        out = {"error": _error_of(
            lambda: w.wait(timeout=datetime.timedelta(seconds=2)))}
        out["seconds"] = time.monotonic() - t0
        out["after"] = _error_of(lambda: dist.all_reduce(torch.ones(2)))
        kv.set("wait_gives_up/0", "1")
    else:
        kv.wait(["wait_gives_up/0"], datetime.timedelta(seconds=60))
        out = {"ops": [_error_of(lambda: dist.all_reduce(torch.ones(n)))
                       for n in (1 << 16, 2)]}
    return out
