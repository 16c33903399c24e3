#!/usr/bin/python3
"""torch.distributed gloo baseline of spcoll-bench: the same ops, sizes,
iteration counts and memory bound (bench/bench_common.c's rules, repeated
here), timed per op on rank 0 without a barrier between iterations, written
in the CSV columns every bench source shares.

The Ulysses row is the exchange as users run it today: the seeds' aligned
all-to-all (permute + contiguous + all_to_all_single + transpose +
contiguous, new tensors each call) on a [b, s/P, h, d] tensor. gloo in
torch 1.13 has no reduce_scatter: that row is all_reduce + the own slice,
which is what a gloo user does instead (the `note` column says so).

Run with Debian's python3 (python3-torch):
  /usr/bin/python3 scripts/bench_gloo.py --ranks 4 --max-bytes 268435456 \
      --csv build/bench/gloo_ranks4.csv
Prints numbers; asserts nothing."""
import argparse
import os
import queue as queue_mod
import socket
import sys
import time

OPS = ["all_gather", "all_reduce", "reduce_scatter", "all_to_all", "ulysses"]
MIB = 1 << 20


def next_size(b, max_bytes):
    """bench_next_size: 8 B, x4, and the maximum itself last."""
    if b >= max_bytes:
        return 0
    return max_bytes if b * 4 > max_bytes else b * 4


def iters_for(b, base):
    """bench_iters above 64 KiB: `base` up to 1 MiB, fewer above, never
    under 3. Below, `base` too, not bench_iters' up to 50x: gloo's small
    ops take milliseconds at 8 ranks here."""
    if b <= MIB:
        return base
    return max(3, base * MIB // b)


def warmup_for(b):
    return 1 if b >= 64 * MIB else 3


def mem_bound():
    """bench_mem_bound: $BENCH_MEM_BYTES, else a share of MemAvailable."""
    if os.environ.get("BENCH_MEM_BYTES"):
        return int(os.environ["BENCH_MEM_BYTES"], 0)
    frac = float(os.environ.get("BENCH_MEM_FRACTION") or 0.5)
    if not 0 < frac <= 1:
        frac = 0.5
    avail = 4 << 30
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                avail = int(line.split()[1]) * 1024
    return int(avail * frac)


def ulysses_shape(b, w):
    """bench_ulysses_shape for float32: [1, s/P, h, d], or None."""
    h = 32 if 32 % w == 0 else 4 * w
    elems = b // 4
    if elems < h:
        return None
    d = 128 if elems >= h * 128 else elems // h
    return [1, elems // (h * d), h, d]


def point(op, b, w):
    """(nccl-tests size, elements in, elements out, staging elements) or
    None when too small to give every rank an element."""
    n = b // 4
    per = n // w
    if op == "ulysses":
        shape = ulysses_shape(b, w)
        if shape is None:
            return None
        e = shape[0] * shape[1] * shape[2] * shape[3]
        return e * 4, e, e, 2 * e
    if per < 1:
        return None
    if op == "all_gather":
        return per * w * 4, per, per * w, 0
    if op == "all_reduce":
        return n * 4, n, n, 0
    if op == "reduce_scatter":
        return per * w * 4, per * w, per, 0
    return per * w * 4, per * w, per * w, 0


def bus_factor(op, w):
    return 2.0 * (w - 1) / w if op == "all_reduce" else (w - 1) / w


def seeds_ulysses(dist, x, w):
    """The seeds' _aligned_all_to_all(x, scatter_dim=2, gather_dim=1)."""
    inp_shape = list(x.shape)
    inp_shape[2] = inp_shape[2] // w
    input_t = x.reshape([-1, w] + inp_shape[2:]).transpose(0, 1).contiguous()
    output = torch.empty_like(input_t)
    dist.all_to_all_single(output, input_t)
    output = output.view([w] + inp_shape).contiguous()
    output = output.transpose(0, 1).contiguous()
    return output.view(inp_shape[:1] + [inp_shape[1] * w] + inp_shape[2:])


def run_point(dist, op, b, w, rank, base_iters):
    size, n_in, n_out, _ = point(op, b, w)
    if op == "ulysses":
        x = torch.ones(ulysses_shape(b, w))
    elif op in ("all_reduce", "reduce_scatter"):
        x = torch.zeros(n_in)   # repeated in-place sums stay 0: no overflow
    else:
        x = torch.ones(n_in)
    out = torch.empty(n_out)
    if op == "all_gather":
        outs = list(out.chunk(w))   # views: no torch.cat afterwards
        fn = lambda: dist.all_gather(outs, x)
    elif op == "all_reduce":
        fn = lambda: dist.all_reduce(x)
    elif op == "reduce_scatter":
        def fn():
            dist.all_reduce(x)
            out.copy_(x.chunk(w)[rank])
    elif op == "all_to_all":
        fn = lambda: dist.all_to_all_single(out, x)
    else:
        fn = lambda: seeds_ulysses(dist, x, w)
    iters = iters_for(size, base_iters)
    t = []
    for i in range(-warmup_for(size), iters):
        t0 = time.perf_counter()
        fn()
        if i >= 0:
            t.append(time.perf_counter() - t0)
    return size, iters, t


def worker(rank, args, port, bound, queue):
    torch.set_num_threads(args.threads)
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=args.ranks)
    w = args.ranks
    rows = []
    for op in args.ops:
        b = 8
        while b:
            p = point(op, b, w)
            if p is not None:
                need = w * (p[1] + p[2] + p[3]) * 4
                if need > bound:
                    if rank == 0:
                        print(f"# skip {op} {p[0]} B: needs "
                              f"{need / (1 << 30):.1f} GiB, bound "
                              f"{bound / (1 << 30):.1f} GiB", flush=True)
                else:
                    size, iters, t = run_point(dist, op, b, w, rank,
                                               args.iters)
                    if rank == 0:
                        rows.append(report_row(op, w, size, iters, t))
            b = next_size(b, args.max_bytes)
    dist.destroy_process_group()
    if rank == 0:
        queue.put(rows)


def report_row(op, w, size, iters, t):
    mean = sum(t) / len(t) * 1e6
    s = sorted(t)
    p50 = s[len(s) // 2] * 1e6
    p99 = s[int((len(s) - 1) * 0.99)] * 1e6
    alg = size / (mean * 1e-6) / 1e9
    bus = alg * bus_factor(op, w)
    note = "all_reduce+slice" if op == "reduce_scatter" else ""
    print(f"{'gloo':<10} {op:<15} {size:11d} {size // 4:10d} {'float':>6} "
          f"{mean:10.1f} {alg:9.3f} {bus:9.3f} {p50:9.1f} {p99:9.1f} {note}",
          flush=True)
    return (f"gloo,{op},{w},{size},{size // 4},float,{mean:.2f},{alg:.4f},"
            f"{bus:.4f},{p50:.2f},{p99:.2f},{iters},{note}")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--max-bytes", type=lambda v: int(v, 0), default=1 << 28)
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--threads", type=int, default=0,
                    help="torch threads per rank (default: cores / ranks)")
    ap.add_argument("--csv", default="gloo.csv")
    args = ap.parse_args()
    args.ops = args.ops.split(",")
    bad = [o for o in args.ops if o not in OPS]
    if bad or args.ranks < 2 or args.iters < 1 or args.max_bytes < 8:
        ap.error(f"unknown ops {bad}" if bad else "ranks >= 2, iters >= 1")
    if args.threads <= 0:
        args.threads = max(1, (os.cpu_count() or 1) // args.ranks)
    bound = mem_bound()
    print(f"# gloo (torch {torch.__version__}): {args.ranks} ranks, float32, "
          f"up to {args.max_bytes} B, memory bound {bound / (1 << 30):.1f} "
          f"GiB, {args.threads} torch thread(s) per rank, mean time of "
          f"rank 0", flush=True)
    print(f"{'# source':<10} {'op':<15} {'size(B)':>11} {'count':>10} "
          f"{'type':>6} {'time(us)':>10} {'algbw':>9} {'busbw':>9} "
          f"{'p50(us)':>9} {'p99(us)':>9} note", flush=True)
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=worker, args=(r, args, port, bound, queue))
             for r in range(args.ranks)]
    for p in procs:
        p.start()
    rows = []
    while True:   # rank 0's rows, unless a rank died first
        try:
            rows = queue.get(timeout=1)
            break
        except queue_mod.Empty:
            if any(p.exitcode not in (None, 0) for p in procs):
                for p in procs:
                    if p.exitcode is None:
                        p.terminate()
                break
    failed = 0
    for r, p in enumerate(procs):
        p.join()
        if p.exitcode != 0:
            print(f"bench_gloo: rank {r} exited with {p.exitcode}",
                  file=sys.stderr)
            failed += 1
    with open(args.csv, "w") as f:
        f.write("source,op,ranks,size_bytes,count,type,time_us,algbw_gbs,"
                "busbw_gbs,p50_us,p99_us,iters,note\n")
        for row in rows:
            f.write(row + "\n")
    print(f"# wrote {args.csv}")
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        import torch
        import torch.multiprocessing as mp
    except ImportError as e:
        print(f"bench_gloo: cannot import torch ({e}); run it with Debian's "
              f"/usr/bin/python3 (python3-torch)", file=sys.stderr)
        sys.exit(2)
    sys.exit(main())
