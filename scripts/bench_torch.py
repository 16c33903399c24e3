#!/usr/bin/env python3
"""`make bench-torch`: ordinary torch CPU tensors through torch.distributed on
backend "spcoll" (the C++ c10d backend) and on gloo, in the same processes,
beside spcoll's own C call at the same size on spcoll memory, in one run.

For every rank count (--ranks, "2 4") and every size of the ladder (8 B,
x4, up to --max-bytes, 32 MiB):
  spcoll      dist.* on the world group, dist.init_process_group("spcoll"):
              blocking collectives take tensors from 32 KiB as caller
              memory (the other ranks read them with process_vm_readv),
              smaller ones are staged; a line after the table gives the
              bytes each way (spcoll.c10d.counts())
  spcoll FR=0 the same ops on a second "spcoll" group made with
              TORCH_FR_BUFFER_SIZE=0, whose ops nothing records in torch's
              FlightRecorder (the C++ backend records the others itself,
              client/torch/flight.hpp; where it cannot, torch's hook
              does); timed in turn with the first, in chunks
  spcoll alloc  the same ops on the world group again, on tensors torch
              allocates after spcoll.c10d.use_cpu_allocator() (spcoll
              memory: the backend takes them in place): a second phase of
              the same processes, after every point of the others, since
              the allocator cannot be turned off; spcoll.c10d.counts()
              around each point checks that it staged nothing (a warning
              line if it did; nothing is asserted). --no-alloc leaves it out
  floor       all_reduce only: the same op on a group of torch's
              FakeProcessGroup, a C++ backend whose allreduce does nothing
              and completes at once (nothing recorded, as FR=0):
              what torch.distributed itself costs per call on this
              machine, timed in turn with the two spcoll groups. (Its
              gathers and all-to-all copy tensors, so they are no floor.)
  gloo        the same ops on a gloo group of the same processes
  C call      build/bin/spcoll-torch-ccall (bench/torch_ccall.c): the spcoll
              op the backend runs for that torch op, called from C with
              spc_run on tensors in spcoll memory, through its own spcolld,
              in a run of its own just before the torch processes
Before the tables: build/bin/spcoll-copy-rate (bench/copy_rate.c), how fast
one process copies another's memory here by memcpy from a shared mapping
(spcoll memory: the C call, the allocator) and by process_vm_readv (caller
memory), from torch's default allocation and from one under its
THP_MEM_ALLOC_ENABLE=1: the second over the first bounds what ordinary
tensors can reach against the C call where the copy dominates.
--thp runs the torch processes with THP_MEM_ALLOC_ENABLE=1 (torch's CPU
allocator then advises transparent huge pages for tensors from 2 MiB,
which process_vm_readv pins and page faults fill far faster); without it
they run with it unset, torch's default. `make bench-torch` runs both.
Ops: all_reduce (in place), all_gather_into_tensor, reduce_scatter_tensor,
all_to_all_single, and the seeds' Ulysses exchange (bench/torch_backend.py's
seeds_a2a: permute + contiguous + all_to_all_single + reshape of fp32
[s/P, b, h, d], b = 1, h = 32, d = 128, the sizes of the ladder from 32 KiB;
its C call is spcoll's one-copy all_to_all(scatter_dim=2, gather_dim=0)).
Sizes follow nccl-tests: the output for all_gather, the input for
reduce_scatter, the per-rank buffer otherwise; points that give a rank no
element are left out.

Timing: per op on rank 0, no barrier between iterations (as spcoll-bench).
The torch processes first run 5000 8 B all_reduces on each spcoll group.
Each block: 2 untimed ops, a few calibration ops, then rank 0 picks the
warm-up and timed iterations so the timed ones take about --block-ms
(at least --min-iters, at most 5x --iters below 64 KiB, --iters up to 1 MiB,
fewer above), which the ranks agree on through one all_reduce MAX.
Each point's spcoll result (and spcoll alloc's) is compared once with
gloo's (integer-valued data: exact); a difference fails the run. Times are
never checked.

A private spcolld (--spcolld, --workers = CPUs) serves the torch processes;
the C call starts its own. Writes torch_ccall_ranksN.csv (C call),
torch_ranksN.csv (torch, rank 0), torch_summary.csv / .json (merged, with
ratios) and bench_torch.log under --out. Prints numbers; asserts nothing.

  build/torch-latest/bin/python scripts/bench_torch.py --ranks "2 4" \\
      --out build/bench
"""
import argparse
import csv
import datetime
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
OPS = ["all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor",
       "all_to_all_single", "ulysses"]
SOURCES = ["spcoll", "spcoll_fr0", "floor", "spcoll_alloc", "gloo",
           "c_call"]
COLS = ["source", "op", "ranks", "size_bytes", "seq", "iters", "warmup",
        "mean_us", "p50_us", "p90_us", "p99_us", "direct_bytes",
        "staged_in_bytes", "staged_out_bytes", "refused_bytes"]
KIB, MIB = 1 << 10, 1 << 20


# ---- what the C side (bench/torch_ccall.c) repeats ----

def next_size(b, max_bytes):
    """bench_next_size: 8 B, x4, and the maximum itself last."""
    if b >= max_bytes:
        return 0
    return max_bytes if b * 4 > max_bytes else b * 4


def iters_cap(b, base):
    """The most timed iterations of a point: bench_iters' rule (up to 50x
    base below 64 KiB, base up to 1 MiB, fewer above), at least 5."""
    if b < 64 * KIB:
        return base * min(64 * KIB // b, 50)
    if b <= MIB:
        return base
    return max(5, base * MIB // b)


WARM_MAX = 50000
WARM_FIRST = 5000    # 8 B all_reduces on each spcoll group before any point


def plan(est_s, b, args):
    """Rank 0's (warm-up, timed iterations) from one op's estimated time:
    each about --block-ms long; warm-up at most WARM_MAX ops, at least 2;
    timed ones from --min-iters to iters_cap."""
    cap = iters_cap(b, args.iters)
    n = args.block_ms / 1e3 / est_s if est_s > 0 else cap
    iters = int(min(cap, max(args.min_iters, n)))
    wn = args.block_ms / 1e3 / est_s if est_s > 0 else WARM_MAX
    warm = max(2, int(min(WARM_MAX, wn)))
    return warm, iters


def geometry(op, b, w):
    """The point of op at ladder size b for w ranks (torch_ccall.c's
    geometry()): dict(size, seq, n, per, shape) or None when a rank would
    get no element."""
    n = b // 4
    per = n // w
    if op == "all_reduce":
        return dict(size=n * 4, seq=0, n=n) if n >= 1 else None
    if op == "ulysses":
        h = 32 if 32 % w == 0 else 4 * w
        d = 128
        sp = n // (h * d)
        if sp < 1:
            return None
        return dict(size=sp * h * d * 4, seq=sp * w, shape=[sp, 1, h, d])
    if per < 1:
        return None
    return dict(size=per * w * 4, seq=0, per=per)


# ---- a rank process ----

def stats(ts):
    s = sorted(ts)
    k = len(s)
    return dict(mean_us=sum(s) / k * 1e6, p50_us=s[k // 2] * 1e6,
                p90_us=s[int((k - 1) * 0.9)] * 1e6,
                p99_us=s[int((k - 1) * 0.99)] * 1e6)


def worker(args):
    import torch
    import torch.distributed as dist
    sys.path.insert(0, os.path.join(REPO, "bench"))
    from torch_backend import seeds_a2a
    import spcoll.distributed as sd

    rank, w = args.rank, args.world
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // w))
    dist.init_process_group("spcoll", init_method="file://" + args.store,
                            rank=rank, world_size=w)
    spc = dist.group.WORLD
    old = os.environ.get("TORCH_FR_BUFFER_SIZE")
    os.environ["TORCH_FR_BUFFER_SIZE"] = "0"
    fr0 = dist.new_group(backend="spcoll")
    if old is None:
        del os.environ["TORCH_FR_BUFFER_SIZE"]
    else:
        os.environ["TORCH_FR_BUFFER_SIZE"] = old
    gloo = dist.new_group(backend="gloo")
    # importing it registers backend "fake" (FakeProcessGroup, C++)
    import torch.testing._internal.distributed.fake_pg  # noqa: F401
    fake = dist.new_group(backend="fake")
    hooks = getattr(getattr(dist.distributed_c10d, "_world", None),
                    "pg_flight_recorder_hooks", None)
    info = dict(backend_kind=sd.backend_kind(), torch=torch.__version__,
                threads=torch.get_num_threads(),
                fr_native=sd.backend_kind() == "c++" and
                _c10d_records_flight(),
                fr_hook_world=None if hooks is None else spc in hooks,
                fr_hook_fr0=None if hooks is None else fr0 in hooks,
                fr_hook_gloo=None if hooks is None else gloo in hooks,
                fr_hook_floor=None if hooks is None else fake in hooks)
    agree = torch.zeros(2, dtype=torch.int64)
    # The processes' first ops (the ranks placed on the CPUs, the groups'
    # first plans) before the first point, 8 B all_reduce, is timed.
    t = torch.zeros(2)
    for _ in range(WARM_FIRST):
        dist.all_reduce(t, group=spc)
        dist.all_reduce(t, group=fr0)
    for _ in range(20):
        dist.all_reduce(t, group=gloo)

    def block(fn, groups, b):
        """Times fn(group) for each group, in turn in chunks (ABBA...):
        {group index: [seconds]} and (warm-up, iterations)."""
        for g in groups:
            fn(g)
            fn(g)
        calib = 5 if b <= MIB else 2
        t0 = time.perf_counter()
        for _ in range(calib):
            fn(groups[0])
        est = (time.perf_counter() - t0) / calib
        agree.zero_()
        if rank == 0:
            agree[0], agree[1] = plan(est, b, args)
        dist.all_reduce(agree, op=dist.ReduceOp.MAX, group=spc)
        warm, iters = int(agree[0]), int(agree[1])
        for _ in range(warm):
            for g in groups:
                fn(g)
        nch = min(4, iters) if len(groups) > 1 else 1
        bounds = [iters * c // nch for c in range(nch + 1)]
        ts = {i: [] for i in range(len(groups))}
        clock = time.perf_counter
        for c in range(nch):
            order = range(len(groups)) if c % 2 == 0 else \
                reversed(range(len(groups)))
            for i in order:
                g, out = groups[i], ts[i]
                for _ in range(bounds[c + 1] - bounds[c]):
                    s = clock()
                    fn(g)
                    out.append(clock() - s)
        return ts, warm, iters

    def ints(shape):
        return torch.randint(-8, 8, shape).float()

    def make_point(op, geo):
        """Allocates one point's tensors through the CPU allocator installed
        now: fn(group), the timed op, and check(), which runs it once on
        spcoll's world group and once on gloo: (got, want)."""
        if op == "all_reduce":
            x = torch.zeros(geo["n"])
            fn = lambda g: dist.all_reduce(x, group=g)

            def check():
                x.copy_(ints(x.shape))
                x0 = x.clone()
                fn(spc)
                got = x.clone()
                x.copy_(x0)
                fn(gloo)
                want = x.clone()
                x.zero_()
                return got, want
            return fn, check
        if op == "ulysses":
            x = ints(geo["shape"])
            fn = lambda g: seeds_a2a(x, g)
            return fn, lambda: (fn(spc).clone(), fn(gloo).clone())
        if op == "all_gather_into_tensor":
            x = ints([geo["per"]])
            y = torch.empty(geo["per"] * w)
            fn = lambda g: dist.all_gather_into_tensor(y, x, group=g)
        elif op == "reduce_scatter_tensor":
            x = ints([geo["per"] * w])
            y = torch.empty(geo["per"])
            fn = lambda g: dist.reduce_scatter_tensor(y, x, group=g)
        else:
            x = ints([geo["per"] * w])
            y = torch.empty(geo["per"] * w)
            fn = lambda g: dist.all_to_all_single(y, x, group=g)

        def check():
            fn(spc)
            got = y.clone()
            fn(gloo)
            want = y.clone()
            return got, want
        return fn, check

    def checked(op, size, check, what):
        got, want = check()
        if not torch.equal(got, want):
            print("bench_torch rank %d: %s at %d B: %s's result differs "
                  "from gloo's" % (rank, op, size, what),
                  file=sys.stderr, flush=True)
            sys.exit(1)

    def row(src, op, geo, t, wu, it, **extra):
        r = dict(source=src, op=op, ranks=w, size_bytes=geo["size"],
                 seq=geo["seq"], iters=it, warmup=wu)
        r.update(stats(t))
        r.update(extra)
        rows.append(r)

    points = []
    for op in args.ops:
        b = 8
        while b:
            geo = geometry(op, b, w)
            b = next_size(b, args.max_bytes)
            if geo is not None:
                points.append((op, geo))

    # Phase 1: ordinary torch tensors (torch's own CPU allocator) through
    # the spcoll world group, the FR=0 group and the floor in turn, then
    # gloo.
    # spcoll.c10d.counts() over the whole phase says how the backend took
    # them: as caller memory (blocking collectives), or staged.
    rows = []
    c_before = _counts()
    for op, geo in points:
        size = geo["size"]
        fn, check = make_point(op, geo)
        res = {}
        timed = ("spcoll", "spcoll_fr0", "floor")
        if op != "all_reduce":
            timed = timed[:2]
        groups = {"spcoll": spc, "spcoll_fr0": fr0, "floor": fake}
        ts, warm, iters = block(fn, [groups[src] for src in timed], size)
        for i, src in enumerate(timed):
            res[src] = (ts[i], warm, iters)
        ts, warm, iters = block(fn, [gloo], size)
        res["gloo"] = (ts[0], warm, iters)
        # spcoll's result against gloo's, once (exact: integer values)
        checked(op, size, check, "spcoll")
        if rank == 0:
            for src in res:
                row(src, op, geo, *res[src])
        del fn, check
    info["phase1_counts"] = _counts_delta(c_before, _counts(), gloo)

    # Phase 2, in the same processes: spcoll's CPU allocator installed,
    # every point's tensors (and the plan's agreement tensor) allocated
    # anew, timed on the spcoll world group (recorded in the
    # FlightRecorder, as the "spcoll" column). The allocator stays on to the end, so this
    # phase comes last. spcoll.c10d.counts() before and after each point
    # (its warm-up, timed ops and check) gives what the backend took in
    # place and what it staged; the ranks' sums go into rank 0's row.
    if args.alloc:
        import spcoll.c10d as sc
        sc.use_cpu_allocator()
        agree = torch.zeros(2, dtype=torch.int64)  # noqa: F841 (block's)
        keys = ("direct_bytes", "staged_in_bytes", "staged_out_bytes",
                "allocator_refused_bytes")
        for op, geo in points:
            size = geo["size"]
            c0 = sc.counts()
            fn, check = make_point(op, geo)
            ts, warm, iters = block(fn, [spc], size)
            checked(op, size, check, "spcoll with the allocator")
            c1 = sc.counts()
            d = torch.tensor([c1[k] - c0[k] for k in keys],
                             dtype=torch.int64)
            dist.all_reduce(d, group=gloo)      # not counted: gloo
            if rank == 0:
                row("spcoll_alloc", op, geo, ts[0], warm, iters,
                    direct_bytes=int(d[0]), staged_in_bytes=int(d[1]),
                    staged_out_bytes=int(d[2]), refused_bytes=int(d[3]))
            del fn, check
    dist.barrier(group=gloo)
    dist.destroy_process_group()
    if rank == 0:
        write_csv(args.csv, rows)
        with open(args.csv + ".info", "w") as f:
            json.dump(info, f)
    return 0


_PHASE1_KEYS = ("wrapped_bytes", "direct_bytes", "staged_in_bytes",
                "staged_out_bytes")


def _counts():
    """spcoll.c10d.counts() of this process ({} on a backend without)."""
    try:
        import spcoll.c10d as sc
        return sc.counts() if sc.load() is not None else {}
    except Exception:  # noqa: BLE001 (a count is only reported)
        return {}


def _counts_delta(c0, c1, gloo):
    """c1 - c0 of the phase-1 keys, summed over the ranks (through gloo)."""
    import torch
    import torch.distributed as dist
    d = torch.tensor([c1.get(k, 0) - c0.get(k, 0) for k in _PHASE1_KEYS],
                     dtype=torch.int64)
    dist.all_reduce(d, group=gloo)
    return {k: int(v) for k, v in zip(_PHASE1_KEYS, d.tolist())}


# ---- the driver ----

def write_csv(path, rows):
    with open(path, "w", newline="") as f:
        wr = csv.DictWriter(f, COLS, extrasaction="ignore")
        wr.writeheader()
        for r in rows:
            wr.writerow({k: ("%.3f" % v if isinstance(v, float) else v)
                         for k, v in r.items()})


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


class Tee:
    def __init__(self, path):
        self.f = open(path, "w")

    def __call__(self, *a):
        line = " ".join(str(x) for x in a)
        print(line, flush=True)
        self.f.write(line + "\n")
        self.f.flush()


def start_spcolld(spcolld, workers, d):
    sock = os.path.join(d, "spcolld.sock")
    log = open(os.path.join(d, "spcolld.log"), "wb")
    p = subprocess.Popen([spcolld, "--socket", sock, "--workers",
                          str(workers), "--log-level", "error"],
                         stdout=log, stderr=log)
    for _ in range(1000):        # readiness, not a timing check
        if p.poll() is not None:
            break
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(sock)
            return p, sock, log
        except OSError:
            time.sleep(0.01)
    p.kill()
    p.wait()
    log.close()
    raise RuntimeError("spcolld did not start: " +
                       open(log.name, errors="replace").read())


def stop_spcolld(p, log):
    p.send_signal(signal.SIGTERM)
    try:
        rc = p.wait(60)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        rc = "hung after SIGTERM"
    log.close()
    return rc


def run_torch(args, w, csv_path, say):
    """The w rank processes on a private spcolld; 0 when all ended well."""
    d = tempfile.mkdtemp(prefix="spcoll-bench-torch-")
    try:
        daemon, sock, log = start_spcolld(args.spcolld, args.workers, d)
    except RuntimeError as e:
        say("# %s" % e)
        shutil.rmtree(d, ignore_errors=True)
        return 1
    env = dict(os.environ)
    env.update(SPCOLL_SOCKET=sock, SPCOLL_C10D=os.path.abspath(args.c10d),
               SPCOLL_LIB=os.path.abspath(args.lib),
               PYTHONDONTWRITEBYTECODE="1",
               PYTHONPATH=os.pathsep.join(
                   [os.path.join(REPO, "client", "python")] +
                   ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])))
    env.pop("TORCH_FR_BUFFER_SIZE", None)
    env.pop("TORCH_NCCL_TRACE_BUFFER_SIZE", None)
    env.pop("THP_MEM_ALLOC_ENABLE", None)
    if args.thp:
        env["THP_MEM_ALLOC_ENABLE"] = "1"
    store = os.path.join(d, "store")
    procs = []
    for r in range(w):
        cmd = [sys.executable, os.path.abspath(__file__), "--worker",
               "--rank", str(r), "--world", str(w), "--store", store,
               "--csv", csv_path, "--max-bytes", str(args.max_bytes),
               "--iters", str(args.iters), "--min-iters", str(args.min_iters),
               "--block-ms", str(args.block_ms), "--ops", ",".join(args.ops)]
        if not args.alloc:
            cmd.append("--no-alloc")
        procs.append(subprocess.Popen(cmd, env=env))
    deadline = time.time() + args.guard
    bad = 0
    while any(p.poll() is None for p in procs):
        failed = [p for p in procs if p.poll() not in (None, 0)]
        if failed or time.time() > deadline:
            for p in procs:     # a rank failed or hung: end the others
                if p.poll() is None:
                    p.kill()
            break
        time.sleep(0.2)
    for r, p in enumerate(procs):
        p.wait()
        if p.returncode != 0:
            say("# torch rank %d of %d exited with %s" % (r, w, p.returncode))
            bad += 1
    rc = stop_spcolld(daemon, log)
    if rc != 0:
        say("# spcolld of the torch run exited with %s; log:\n%s" %
            (rc, open(log.name, errors="replace").read()))
        bad += 1
    shutil.rmtree(d, ignore_errors=True)
    return bad


def human(b):
    for unit, k in (("MiB", MIB), ("KiB", KIB)):
        if b >= k and b % k == 0:
            return "%d %s" % (b // k, unit)
    return "%d B" % b


def ratio(a, b):
    return a / b if a and b else None


def fmt(v, width, prec=1):
    return ("%*.*f" % (width, prec, v)) if v is not None else \
        "%*s" % (width, "-")


def merge(rows):
    """{(ranks, op, size): {source: row}} in measuring order."""
    pts = {}
    for r in rows:
        key = (int(r["ranks"]), r["op"], int(r["size_bytes"]))
        pts.setdefault(key, {})[r["source"]] = r
    return pts


def summary_rows(pts):
    out = []
    for (w, op, size), by in pts.items():
        s = dict(ranks=w, op=op, size_bytes=size, seq=0)
        for src in SOURCES:
            r = by.get(src)
            for k in ("p50_us", "mean_us", "p90_us", "iters"):
                v = r.get(k) if r else None
                s["%s_%s" % (src, k)] = (float(v) if k != "iters" else
                                         int(v)) if v not in (None, "") \
                    else None
            if r and int(r.get("seq") or 0):
                s["seq"] = int(r["seq"])
        a = by.get("spcoll_alloc")
        for k in ("direct_bytes", "staged_in_bytes", "staged_out_bytes",
                  "refused_bytes"):
            v = a.get(k) if a else None
            s["spcoll_alloc_" + k] = int(v) if v not in (None, "") else None
        for k in ("p50_us", "mean_us"):
            s["gloo_over_spcoll_" + k[:-3]] = ratio(s["gloo_" + k],
                                                    s["spcoll_" + k])
            s["spcoll_over_c_" + k[:-3]] = ratio(s["spcoll_" + k],
                                                 s["c_call_" + k])
            s["spcoll_fr0_over_c_" + k[:-3]] = ratio(s["spcoll_fr0_" + k],
                                                     s["c_call_" + k])
            s["gloo_over_alloc_" + k[:-3]] = ratio(s["gloo_" + k],
                                                   s["spcoll_alloc_" + k])
            s["alloc_over_c_" + k[:-3]] = ratio(s["spcoll_alloc_" + k],
                                                s["c_call_" + k])
        a, b = s["spcoll_p50_us"], s["spcoll_fr0_p50_us"]
        s["fr_on_minus_off_p50_us"] = a - b if a is not None and \
            b is not None else None
        f = s["floor_p50_us"]
        s["fr0_minus_floor_p50_us"] = b - f if b is not None and \
            f is not None else None
        out.append(s)
    return out


def _c10d_records_flight():
    from spcoll import c10d
    return c10d.records_flight()


def print_table(say, w, summ):
    say("")
    say("# %d ranks: microseconds per op on rank 0 (p50 and mean); ratios "
        "of p50; FR=0: a second spcoll group whose ops are not recorded in "
        "torch's FlightRecorder, timed in turn with the first; floor (all_reduce): torch's "
        "FakeProcessGroup, whose allreduce does nothing, timed in turn with "
        "both: torch.distributed's own cost per call, which FR=0-floor "
        "leaves out; alloc: the spcoll world group "
        "again, on tensors allocated after spcoll.c10d.use_cpu_allocator() "
        "(spcoll memory, taken in place), a second phase of the same "
        "processes; C call: spc_run on spcoll memory, a run of its own; "
        "ulysses: the seeds' exchange of fp32 [s/P, 1, 32, 128], s the "
        "whole sequence, its C call spcoll's one-copy all_to_all" % w)
    say("%-22s %-16s %17s %17s %8s %17s %19s %17s %7s %7s %7s %7s %6s "
        "%6s" % (
            "", "", "---- spcoll ----", "- spcoll FR=0 -", "floor",
            "- spcoll alloc -", "----- gloo ------", "--- C call ----",
            "gloo/", "spcoll", "gloo/", "alloc", "FR on", "FR=0"))
    say("%-22s %-16s %8s %8s %8s %8s %8s %8s %8s %9s %9s %8s %8s %7s %7s "
        "%7s %7s %6s %6s" % (
            "op", "size", "p50", "mean", "p50", "mean", "p50", "p50", "mean",
            "p50", "mean", "p50", "mean", "spcoll", "/C", "alloc", "/C",
            "-off", "-floor"))
    for s in summ:
        if s["ranks"] != w:
            continue
        size = human(s["size_bytes"])
        if s["op"] == "ulysses":
            size += " s=%d" % s["seq"]
        say("%-22s %-16s %s %s %s %s %s %s %s %s %s %s %s %s %s %s %s %s %s"
            % (
            s["op"], size,
            fmt(s["spcoll_p50_us"], 8), fmt(s["spcoll_mean_us"], 8),
            fmt(s["spcoll_fr0_p50_us"], 8), fmt(s["spcoll_fr0_mean_us"], 8),
            fmt(s["floor_p50_us"], 8),
            fmt(s["spcoll_alloc_p50_us"], 8),
            fmt(s["spcoll_alloc_mean_us"], 8),
            fmt(s["gloo_p50_us"], 9), fmt(s["gloo_mean_us"], 9),
            fmt(s["c_call_p50_us"], 8), fmt(s["c_call_mean_us"], 8),
            fmt(s["gloo_over_spcoll_p50"], 7, 2),
            fmt(s["spcoll_over_c_p50"], 7, 2),
            fmt(s["gloo_over_alloc_p50"], 7, 2),
            fmt(s["alloc_over_c_p50"], 7, 2),
            fmt(s["fr_on_minus_off_p50_us"], 6),
            fmt(s["fr0_minus_floor_p50_us"], 6)))
    staging_check(say, w, summ)
    targets(say, w, summ)


def targets(say, w, summ):
    """The issue's targets against this run's p50s: 8 B all_reduce at most
    5 us, every point at least 3x gloo, from 1 MiB at least 0.8x the C
    call; for the spcoll and the spcoll alloc columns, with the misses."""
    rows = [s for s in summ if s["ranks"] == w]
    ar8 = [s for s in rows if s["op"] == "all_reduce" and s["size_bytes"] == 8]
    if ar8 and ar8[0]["spcoll_p50_us"] is not None:
        say("# %d ranks, targets: all_reduce 8 B p50 %.1f us (at most 5 "
            "at 2 ranks)" % (w, ar8[0]["spcoll_p50_us"]))
    for col, name in (("spcoll", "spcoll"), ("spcoll_alloc", "spcoll alloc")):
        for what, ref, least, want in (
                (">= 3x gloo", "gloo_p50_us", 0, 3.0),
                ("from 1 MiB >= 0.8x the C call", "c_call_p50_us", MIB, 0.8)):
            pts, miss = 0, []
            for s in rows:
                t = s.get(col + "_p50_us")
                base = s[ref]
                if t is None or base is None or t <= 0 or \
                        s["size_bytes"] < least:
                    continue
                pts += 1
                r = base / t
                if r < want:
                    miss.append("%s %s %.2fx" % (s["op"], human(s["size_bytes"]),
                                                 r))
            if pts:
                say("# %d ranks, targets, %s %s: %d of %d points%s" % (
                    w, name, what, pts - len(miss), pts,
                    "; below: " + ", ".join(miss) if miss else ""))


def staging_check(say, w, summ):
    """The alloc points' sanity line: spcoll.c10d.counts() deltas over each
    point (its warm-up, timed ops and check), summed over the ranks. A
    point that staged anything gets a warning line; nothing is asserted."""
    pts = [s for s in summ if s["ranks"] == w and
           s["spcoll_alloc_direct_bytes"] is not None]
    if not pts:
        say("# %d ranks: no \"spcoll alloc\" points (phase left out or "
            "failed)" % w)
        return
    staged = 0
    for s in pts:
        i, o = s["spcoll_alloc_staged_in_bytes"], \
            s["spcoll_alloc_staged_out_bytes"]
        r = s["spcoll_alloc_refused_bytes"] or 0
        if i or o or r:
            staged += 1
            say("# WARNING: %d ranks, spcoll alloc, %s %s: the backend "
                "staged %d B in and %d B out over the point (all ranks; "
                "%d B taken in place; the allocator refused %d B): the "
                "column is not all in place" % (
                    w, s["op"], human(s["size_bytes"]), i, o,
                    s["spcoll_alloc_direct_bytes"], r))
    say("# %d ranks: staging check (spcoll.c10d.counts() over each alloc "
        "point, all ranks): %d of %d points staged nothing; %.1f MiB taken "
        "in place, %d B staged in, %d B out, allocator refused %d B" % (
            w, len(pts) - staged, len(pts),
            sum(s["spcoll_alloc_direct_bytes"] for s in pts) / MIB,
            sum(s["spcoll_alloc_staged_in_bytes"] for s in pts),
            sum(s["spcoll_alloc_staged_out_bytes"] for s in pts),
            sum(s["spcoll_alloc_refused_bytes"] or 0 for s in pts)))


def machine(say, args):
    say("# date: %s" % datetime.datetime.now(datetime.timezone.utc)
        .strftime("%Y-%m-%d %H:%M UTC"))
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    say("# machine: %s, %d CPUs, kernel %s; CPU timings (torch CPU tensors)"
        % (model or platform.processor(), os.cpu_count() or 0,
           platform.release()))
    try:
        with open("/proc/loadavg") as f:
            say("# load average: %s" % " ".join(f.read().split()[:3]))
    except OSError:
        pass
    say("# knobs: BENCH_TORCH_RANKS='%s' BENCH_TORCH_MAX_BYTES=%d "
        "BENCH_TORCH_ITERS=%d BENCH_TORCH_MIN_ITERS=%d "
        "BENCH_TORCH_BLOCK_MS=%g ops=%s; spcolld --workers %d; spcoll "
        "alloc %s" % (
            " ".join(map(str, args.ranks)), args.max_bytes, args.iters,
            args.min_iters, args.block_ms, ",".join(args.ops), args.workers,
            "on" if args.alloc else "off (--no-alloc)"))
    thp = "?"
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            thp = f.read().strip()
    except OSError:
        pass
    say("# torch processes: THP_MEM_ALLOC_ENABLE=%s (%s); the kernel's "
        "transparent huge pages: %s" % (
            "1" if args.thp else "unset",
            "--thp: tensors from 2 MiB advised MADV_HUGEPAGE" if args.thp
            else "torch's default", thp))


def copy_rates(say, prog):
    """spcoll-copy-rate's lines: the bound of caller memory here."""
    p = subprocess.run([prog], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True)
    for line in p.stdout.splitlines():
        say("# copy rate, %s" % line)
    if p.returncode != 0:
        say("# %s failed (exit %d)" % (os.path.basename(prog), p.returncode))


def driver(args):
    os.makedirs(args.out, exist_ok=True)
    for name in os.listdir(args.out):     # no stale rows in the merge
        if name.startswith(("torch_ranks", "torch_ccall_ranks",
                            "torch_summary")):
            os.unlink(os.path.join(args.out, name))
    say = Tee(os.path.join(args.out, "bench_torch.log"))
    start = time.time()
    machine(say, args)
    copy_rates(say, args.copy_rate)
    rows, infos, bad = [], {}, 0
    for w in args.ranks:
        t0 = time.time()
        ccsv = os.path.join(args.out, "torch_ccall_ranks%d.csv" % w)
        say("# %d ranks: C calls (%s) ..." % (w, os.path.basename(args.ccall)))
        rc = subprocess.call([args.ccall, "--spcolld", args.spcolld,
                              "--ranks", str(w), "--max-bytes",
                              str(args.max_bytes), "--iters", str(args.iters),
                              "--min-iters", str(args.min_iters),
                              "--block-ms", str(args.block_ms),
                              "--workers", str(args.workers),
                              "--ops", ",".join(args.ops), "--csv", ccsv])
        if rc != 0:
            say("# the C calls failed at %d ranks (exit %d)" % (w, rc))
            bad += 1
        elif os.path.exists(ccsv):
            rows += read_csv(ccsv)
        t1 = time.time()
        tcsv = os.path.join(args.out, "torch_ranks%d.csv" % w)
        say("# %d ranks: C calls took %.0f s; torch (spcoll, spcoll FR=0, "
            "floor, gloo%s) ..." % (w, t1 - t0, "; then spcoll alloc" if args.alloc
                             else ""))
        if run_torch(args, w, tcsv, say) != 0:
            bad += 1
        if os.path.exists(tcsv):
            rows += read_csv(tcsv)
        if os.path.exists(tcsv + ".info"):
            with open(tcsv + ".info") as f:
                infos[w] = json.load(f)
            os.unlink(tcsv + ".info")
        say("# %d ranks: torch took %.0f s" % (w, time.time() - t1))
        if w in infos:
            i = infos[w]
            say("# torch %s, backend \"spcoll\" is the %s backend, %d torch "
                "thread(s) per rank; FlightRecorder: spcoll records "
                "natively %s; torch's hook attached to the spcoll "
                "world group %s, FR=0 group %s, gloo group %s, floor group "
                "%s" % (
                    i["torch"], i["backend_kind"], i["threads"],
                    i.get("fr_native"),
                    i["fr_hook_world"], i["fr_hook_fr0"], i["fr_hook_gloo"],
                    i.get("fr_hook_floor")))
            c = i.get("phase1_counts") or {}
            say("# %d ranks, ordinary tensors (spcoll and FR=0 columns, all "
                "ranks, warm-ups and checks included): %.1f MiB passed as "
                "caller memory (blocking collectives: the other ranks read "
                "it with process_vm_readv), %.1f MiB in spcoll memory, "
                "%.1f MiB staged in, %.1f MiB staged out" % (
                    w, c.get("wrapped_bytes", 0) / MIB,
                    c.get("direct_bytes", 0) / MIB,
                    c.get("staged_in_bytes", 0) / MIB,
                    c.get("staged_out_bytes", 0) / MIB))
        print_table(say, w, [s for s in summary_rows(merge(rows))
                             if s["ranks"] == w])
    summ = summary_rows(merge(rows))
    keys = list(summ[0].keys()) if summ else []
    with open(os.path.join(args.out, "torch_summary.csv"), "w",
              newline="") as f:
        wr = csv.DictWriter(f, keys)
        wr.writeheader()
        for s in summ:
            wr.writerow({k: ("%.4f" % v if isinstance(v, float) else
                             "" if v is None else v) for k, v in s.items()})
    with open(os.path.join(args.out, "torch_summary.json"), "w") as f:
        json.dump(dict(ranks=args.ranks, max_bytes=args.max_bytes,
                       iters=args.iters, min_iters=args.min_iters,
                       block_ms=args.block_ms, workers=args.workers,
                       cpus=os.cpu_count(), torch=infos, points=summ),
                  f, indent=1)
    say("")
    say("# FlightRecorder: torch %s records every op of a process group "
        "in its FlightRecorder: gloo and the C++ spcoll backend record "
        "natively (client/torch/flight.hpp), other backends through a hook "
        "torch attaches (_maybe_attach_flight_recorder); "
        "TORCH_FR_BUFFER_SIZE=0 in the environment turns both off. The "
        "FR=0 columns are a spcoll group made with it set." %
        (next(iter(infos.values()))["torch"] if infos else "2.x"))
    for s in summ:
        if s["op"] == "all_reduce" and s["size_bytes"] == 8:
            say("# all_reduce 8 B, %d ranks: p50 %s us recorded, %s us "
                "with TORCH_FR_BUFFER_SIZE=0 (mean %s / %s); torch's own "
                "floor (FakeProcessGroup, not recorded) %s us" % (
                    s["ranks"], fmt(s["spcoll_p50_us"], 0),
                    fmt(s["spcoll_fr0_p50_us"], 0),
                    fmt(s["spcoll_mean_us"], 0),
                    fmt(s["spcoll_fr0_mean_us"], 0),
                    fmt(s["floor_p50_us"], 0)))
    say("# wrote %s/torch_summary.csv, torch_summary.json, "
        "torch_ranksN.csv, torch_ccall_ranksN.csv, bench_torch.log" %
        args.out)
    try:
        with open("/proc/loadavg") as f:
            say("# load average at the end: %s" %
                " ".join(f.read().split()[:3]))
    except OSError:
        pass
    say("# bench-torch took %.0f s" % (time.time() - start))
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    build = os.environ.get("BUILD", os.path.join(REPO, "build"))
    ap.add_argument("--ranks", default="2 4",
                    help="rank counts, e.g. \"2 4\"")
    ap.add_argument("--max-bytes", type=lambda v: int(v, 0), default=32 * MIB)
    ap.add_argument("--iters", type=int, default=200,
                    help="timed iterations' cap from 64 KiB to 1 MiB "
                    "(5x below, fewer above)")
    ap.add_argument("--min-iters", type=int, default=10)
    ap.add_argument("--block-ms", type=float, default=250,
                    help="about how long one block's timed iterations take")
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--out", default=os.path.join(build, "bench"))
    ap.add_argument("--spcolld", default=os.path.join(build, "bin", "spcolld"))
    ap.add_argument("--ccall", default=os.path.join(build, "bin",
                                                    "spcoll-torch-ccall"))
    ap.add_argument("--copy-rate", default=os.path.join(build, "bin",
                                                        "spcoll-copy-rate"))
    ap.add_argument("--c10d", default=os.path.join(build, "python", "spcoll",
                                                   "_c10d.so"))
    ap.add_argument("--lib", default=os.path.join(build, "lib",
                                                  "libspclient.so"))
    ap.add_argument("--no-alloc", dest="alloc", action="store_false",
                    help="leave out the \"spcoll alloc\" phase (spcoll's "
                    "CPU allocator)")
    ap.add_argument("--thp", action="store_true",
                    help="run the torch processes with "
                    "THP_MEM_ALLOC_ENABLE=1 (torch's CPU allocator advises "
                    "transparent huge pages from 2 MiB)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                    help="spcolld's mover threads (default: CPUs)")
    ap.add_argument("--guard", type=int, default=1800,
                    help="seconds before hung rank processes are killed "
                    "(a hang guard, not a timing check)")
    # a rank process (started by the driver)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--world", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--store", help=argparse.SUPPRESS)
    ap.add_argument("--csv", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.ops = [o for o in args.ops.split(",") if o]
    bad = [o for o in args.ops if o not in OPS]
    if bad or not args.ops or args.iters < 1 or args.min_iters < 1 or \
            args.max_bytes < 8 or args.block_ms <= 0:
        ap.error("unknown ops %s" % bad if bad else
                 "ops, --iters >= 1, --min-iters >= 1, --max-bytes >= 8")
    if args.worker:
        return worker(args)
    args.ranks = [int(r) for r in args.ranks.replace(",", " ").split()]
    if not args.ranks or min(args.ranks) < 2:
        ap.error("--ranks: rank counts of 2 or more")
    for what, path in (("spcolld", args.spcolld), ("C call", args.ccall),
                       ("copy rates", args.copy_rate),
                       ("c10d extension", args.c10d),
                       ("libspclient", args.lib)):
        if not os.path.exists(path):
            print("bench_torch: no %s at %s: make bench-torch-deps" % (
                what, path), file=sys.stderr)
            return 2
    return driver(args)


if __name__ == "__main__":
    sys.exit(main())
