"""What backend "spcoll" costs for the seeds' Ulysses exchange, measured
against gloo and against spcoll's one-copy wrapper. Prints a table; asserts
nothing (a benchmark, not a test).

    python3 bench/torch_backend.py [WORLD] [SEQ] [ITERS]

with spcolld running (SPCOLL_SOCKET) and the package on PYTHONPATH. The
exchange is [s/P, b, h, d] -> [s, b, h/P, d], fp32, b = 1, h = 32,
d = 128:
  seeds/spcoll   permute + contiguous + dist.all_to_all_single + reshape,
                 process group of backend "spcoll" (input staged, output
                 copied back: plain torch tensors)
  seeds/gloo     the same code on a gloo process group
  backend/zero   dist.all_to_all_single on the spcoll group with input and
                 output made by spcoll.distributed.empty (no staging, the
                 daemon writes the output in place); the permute remains
  native         spcoll.all_to_all(x, pg, scatter_dim=2, gather_dim=0):
                 one copy by the daemon, no permute, x a plain tensor
  native/zero    the same with x already in spcoll memory
"""
import multiprocessing as mp
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist


def seeds_a2a(x, group, out=None, tmp=None):
    w = dist.get_world_size(group)
    sp, b, h, d = x.shape
    t = x.reshape(sp, b, w, h // w, d).permute(2, 0, 1, 3, 4)
    if tmp is not None:
        tmp.copy_(t)
        t = tmp
    else:
        t = t.contiguous()
    o = torch.empty_like(t) if out is None else out
    dist.all_to_all_single(o, t, group=group)
    return o.reshape(w * sp, b, h // w, d)


def rank_main(rank, world, store, seq, iters, q):
    import spcoll
    import spcoll.distributed as sd
    torch.set_num_threads(1)
    dist.init_process_group("spcoll", init_method="file://" + store,
                            rank=rank, world_size=world)
    gloo = dist.new_group(backend="gloo")
    sp_pg = dist.group.WORLD
    b, h, d = 1, 32, 128
    x = torch.randn(seq // world, b, h, d)
    xz = sd.empty(x.shape)
    xz.copy_(x)
    tmpz = sd.empty([world, seq // world, b, h // world, d])
    outz = sd.empty([world, seq // world, b, h // world, d])
    cases = {
        "seeds/spcoll": lambda: seeds_a2a(x, sp_pg),
        "seeds/gloo": lambda: seeds_a2a(x, gloo),
        "backend/zero": lambda: seeds_a2a(x, sp_pg, outz, tmpz),
        "native": lambda: spcoll.all_to_all(x, sp_pg, 2, 0),
        "native/zero": lambda: spcoll.all_to_all(xz, sp_pg, 2, 0),
    }
    ref = seeds_a2a(x, gloo)
    res = {}
    for name, fn in cases.items():
        y = fn()
        assert torch.equal(y, ref), name     # the same bytes every way
        ts = []
        for _ in range(iters):
            dist.barrier(group=gloo)
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        res[name] = statistics.median(ts)
    if rank == 0:
        q.put(res)
    dist.destroy_process_group()


def main():
    world = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    seq = int(sys.argv[2]) if len(sys.argv) > 2 else 4096
    iters = int(sys.argv[3]) if len(sys.argv) > 3 else 20
    store = "/tmp/spcoll-bench-store-%d" % os.getpid()
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    ps = [ctx.Process(target=rank_main, args=(r, world, store, seq, iters, q))
          for r in range(world)]
    for p in ps:
        p.start()
    res = q.get()
    for p in ps:
        p.join()
    if os.path.exists(store):
        os.unlink(store)
    mib = seq // world * 32 * 128 * 4 / 2 ** 20
    print("torch %s, %d ranks, [s/P, b, h, d] = [%d, 1, 32, 128] fp32 "
          "(%.1f MiB per rank), median of %d" % (torch.__version__, world,
                                                 seq // world, mib, iters))
    base = res["seeds/gloo"]
    print("%-14s %10s %10s" % ("way", "ms", "vs gloo"))
    for k, v in res.items():
        print("%-14s %10.2f %9.2fx" % (k, v * 1e3, base / v))


if __name__ == "__main__":
    main()
