#!/usr/bin/python3
"""Merge one `make bench` run: spcoll rows (the best of its rounds where
it ran more than one) next to their same-run baselines (Open MPI plain,
with glibc's mmap threshold raised, and plain again for the small sizes;
gloo, ucx_perftest) with the ratio to each, the ratio of the paired run
(spcoll and Open MPI timed in turn in the same processes, up to
BENCH_PAIR_BYTES), the targets of issues 8 and 18 with how far each is
from them, summary CSV/JSON, and busbw-vs-size PNGs drawn with gnuplot.

Usage: scripts/bench_report.py OUT_DIR   (what scripts/bench_run.sh wrote)
Ratios are spcoll busbw / baseline busbw at the same op, rank count and
size (for the Ulysses rows that is the baseline's time / spcoll's time);
x_ucx compares with ucx_perftest tag_bw at the same message size, the
cross-node transport's ceiling. Prints numbers; asserts nothing."""
import csv
import glob
import json
import os
import shutil
import subprocess
import sys

OPS = ["all_gather", "all_reduce", "reduce_scatter", "all_to_all", "ulysses"]
TARGET_BYTES = 16 << 20


def read_csv(path):
    try:
        with open(path) as f:
            return list(csv.DictReader(f))
    except OSError:
        return []


def num(row, key):
    v = (row or {}).get(key, "")
    return float(v) if v not in ("", None) else None


def load(out):
    """Rows by source, keyed by (op, ranks, size)."""
    src = {"spcoll": {}, "mpi": {}, "mpi_tuned": {}, "mpi_third": {},
           "gloo": {}}
    for name in src:
        for path in glob.glob(os.path.join(out, f"{name}_ranks*.csv")):
            for r in read_csv(path):
                if r.get("source") == name:
                    src[name][(r["op"], int(r["ranks"]),
                               int(r["size_bytes"]))] = r
    # The paired run: two rows a point, mpi_paired and spcoll_paired.
    src["pair"] = {}
    for path in glob.glob(os.path.join(out, "pair_ranks*.csv")):
        for r in read_csv(path):
            src["pair"].setdefault((r["op"], int(r["ranks"]),
                                    int(r["size_bytes"])),
                                   {})[r.get("source")] = r
    # spcoll's second round, up to BENCH_AGAIN_BYTES, and third, up to
    # BENCH_THIRD_BYTES (bench_run.sh), run after the baselines: the best
    # of its rounds stands against the best of Open MPI's runs (plain,
    # tuned, and a third plain one up to BENCH_THIRD_BYTES), so neither side
    # is timed in fewer of the VM's states than the other.
    for name, rnd in (("spcoll_again", "2"), ("spcoll_third", "3")):
        for path in glob.glob(os.path.join(out, f"{name}_ranks*.csv")):
            for r in read_csv(path):
                key = (r["op"], int(r["ranks"]), int(r["size_bytes"]))
                best = src["spcoll"].get(key)
                t, t1 = num(r, "time_us"), num(best, "time_us")
                # Only the points of the first round: the best of them.
                if r.get("source") != "spcoll" or not t or not t1:
                    continue
                if t < t1:
                    src["spcoll"][key] = dict(r, round=rnd)
    ucx = {int(r["size_bytes"]): r for r in
           read_csv(os.path.join(out, "ucx.csv")) if r["op"] == "tag_bw"}
    ucx_lat = [r for r in read_csv(os.path.join(out, "ucx.csv"))
               if r["op"] == "tag_lat"]
    lat = read_csv(os.path.join(out, "latency.csv"))
    return src, ucx, ucx_lat, lat


def ratio(a, b):
    return a / b if a is not None and b else None


FACTOR = {"all_reduce": lambda w: 2.0 * (w - 1) / w}


def busbw(row):
    """busbw in GB/s from size and time, not from the rounded CSV column
    (gloo's small sizes round to 0.0000)."""
    t = num(row, "time_us")
    if row is None or not t:
        return None
    w = int(row["ranks"])
    f = FACTOR.get(row["op"], lambda w: (w - 1) / w)(w)
    if row["op"].startswith("tag_"):
        f = 1.0   # point to point: the bandwidth itself
    return int(row["size_bytes"]) / t / 1e3 * f


def merge(src, ucx):
    rows = []
    for key in sorted(src["spcoll"], key=lambda k: (k[1], OPS.index(k[0])
                                                     if k[0] in OPS else 9,
                                                     k[2])):
        s = src["spcoll"][key]
        bus = busbw(s)
        mpi = [(n, src[n].get(key)) for n in ("mpi", "mpi_tuned",
                                               "mpi_third")]
        mpi = [(n, r) for n, r in mpi if r is not None]
        best = max(mpi, key=lambda nr: busbw(nr[1]), default=None)
        gloo = src["gloo"].get(key)
        u = ucx.get(key[2])
        row = {
            "ranks": key[1], "op": key[0], "size_bytes": key[2],
            "time_us": num(s, "time_us"), "algbw_gbs": num(s, "algbw_gbs"),
            "busbw_gbs": bus, "p50_us": num(s, "p50_us"),
            "p99_us": num(s, "p99_us"),
            "copy_efficiency": num(s, "copy_efficiency"),
            "memcpy1_gbs": num(s, "memcpy1_gbs"),
            "memcpyT_gbs": num(s, "memcpyT_gbs"),
            "mpi_busbw_gbs": busbw(src["mpi"].get(key)),
            "mpi_tuned_busbw_gbs": busbw(src["mpi_tuned"].get(key)),
            "mpi_best": best[0] if best else None,
            "gloo_busbw_gbs": busbw(gloo),
            "gloo_note": (gloo or {}).get("note", ""),
            "ucx_gbs": busbw(u),
        }
        # The same bytes against the one-thread memcpy of the same size.
        row["copy_efficiency_1thr"] = (
            row["copy_efficiency"] * row["memcpyT_gbs"] / row["memcpy1_gbs"]
            if row["copy_efficiency"] is not None and row["memcpy1_gbs"]
            else None)
        row["x_mpi"] = ratio(bus, busbw(best[1]) if best else None)
        row["x_gloo"] = ratio(bus, row["gloo_busbw_gbs"])
        row["x_ucx"] = ratio(bus, row["ucx_gbs"])
        row["spcoll_round"] = int(s.get("round", "1"))
        row["mpi_third_busbw_gbs"] = busbw(src["mpi_third"].get(key))
        pair = src["pair"].get(key, {})
        pm, ps = pair.get("mpi_paired"), pair.get("spcoll_paired")
        row["x_pair"] = ratio(busbw(ps), busbw(pm))
        row["x_pair_p50"] = ratio(num(pm, "p50_us"), num(ps, "p50_us"))
        rows.append(row)
    return rows


def fmt(v, spec):
    return format(v, spec) if v is not None else "-"


def print_tables(rows):
    for ranks in sorted({r["ranks"] for r in rows}):
        print(f"\n## {ranks} ranks: spcoll with its ratio to each same-run "
              f"baseline (x = spcoll busbw / baseline busbw)")
        print(f"{'# op':<15} {'size(B)':>11} {'time(us)':>10} {'algbw':>8} "
              f"{'busbw':>8} {'p50(us)':>9} {'p99(us)':>9} {'eff':>5} "
              f"{'eff1':>5} {'memcpyT':>7} | {'mpi':>7} {'x_mpi':>6} "
              f"{'x_pair':>6} | "
              f"{'gloo':>7} "
              f"{'x_gloo':>7} | {'ucx':>7} {'x_ucx':>6}")
        for r in rows:
            if r["ranks"] != ranks:
                continue
            mpi = max([v for v in (r["mpi_busbw_gbs"],
                                   r["mpi_tuned_busbw_gbs"],
                                   r["mpi_third_busbw_gbs"]) if v is not None],
                      default=None)
            tuned = {"mpi_tuned": "*", "mpi_third": '"'}.get(r["mpi_best"],
                                                          " ")
            again = {2: "'", 3: '"'}.get(r["spcoll_round"], " ")
            print(f"{r['op']:<15} {r['size_bytes']:11d} "
                  f"{fmt(r['time_us'], '9.1f')}{again} "
                  f"{fmt(r['algbw_gbs'], '8.3f')} "
                  f"{fmt(r['busbw_gbs'], '8.3f')} {fmt(r['p50_us'], '9.1f')} "
                  f"{fmt(r['p99_us'], '9.1f')} "
                  f"{fmt(r['copy_efficiency'], '5.2f')} "
                  f"{fmt(r['copy_efficiency_1thr'], '5.2f')} "
                  f"{fmt(r['memcpyT_gbs'], '7.2f')} | {fmt(mpi, '7.3f')}"
                  f"{tuned}{fmt(r['x_mpi'], '6.2f')} "
                  f"{fmt(r['x_pair'], '6.2f')} | "
                  f"{fmt(r['gloo_busbw_gbs'], '7.3f')} "
                  f"{fmt(r['x_gloo'], '7.2f')} | {fmt(r['ucx_gbs'], '7.3f')} "
                  f"{fmt(r['x_ucx'], '6.2f')}")
    print("# GB/s = 1e9 B/s; eff = bytes written to all outputs / time / "
          "memcpy at the mover's thread count (memcpyT, GB/s), eff1 the same "
          "against a one-thread memcpy; mpi is the best of plain Open MPI, Open MPI "
          "with glibc.malloc.mmap_threshold raised (* when that) and, up "
          "to BENCH_THIRD_BYTES, a third plain run (\" when that); "
          "' or \" after spcoll's time: from its second or third round "
          "(the best of two up to BENCH_AGAIN_BYTES, of three up to "
          "BENCH_THIRD_BYTES); "
          "x_pair: spcoll busbw / Open MPI's timed in turn in the same "
          "processes (spcoll-pair-bench, up to BENCH_PAIR_BYTES); "
          "gloo reduce_scatter is all_reduce + own slice (torch 1.13 gloo "
          "has none); ucx is ucx_perftest tag_bw, one direction, TCP "
          "loopback")


def targets(rows, lat):
    """Issue 8's targets, each with the measured value and its margin."""
    out = []

    def add(what, row, value, goal, kind=">="):
        if value is None:
            out.append({"target": what, "ranks": row and row["ranks"],
                        "size_bytes": row and row["size_bytes"],
                        "value": None, "goal": goal, "met": None})
            return
        met = value >= goal if kind == ">=" else value <= goal
        out.append({"target": what, "ranks": row and row["ranks"],
                    "size_bytes": row and row["size_bytes"], "value": value,
                    "goal": goal, "met": met})

    for r in rows:
        if r["size_bytes"] < TARGET_BYTES:
            continue
        if r["op"] in ("all_to_all", "ulysses", "all_gather"):
            add(f"{r['op']} copy efficiency", r, r["copy_efficiency"], 0.8)
            add(f"{r['op']} busbw / Open MPI", r, r["x_mpi"], 1.0)
            add(f"{r['op']} busbw / gloo", r, r["x_gloo"], 5.0)
        if r["op"] == "ulysses":
            add("Ulysses exchange speed-up over gloo (seeds' way)", r,
                r["x_gloo"], 2.0)
            add("Ulysses exchange speed-up over Open MPI (seeds' way)", r,
                r["x_mpi"], 2.0)
    for l in lat:
        add(f"{l['op']} 8 B round trip p50 (us)", None, num(l, "p50_us"),
            20.0, "<=")
    return out


def print_goal(rows, key, what):
    print(f"  {what}:")
    for ranks in sorted({r["ranks"] for r in rows}):
        goal = 1.0 if ranks <= 4 else 0.5
        pts = [r for r in rows if r["ranks"] == ranks and r[key]]
        low = [r for r in pts if r[key] < goal]
        if pts:
            print(f"    {ranks} ranks: {len(pts) - len(low)} of {len(pts)} "
                  f">= {goal:g}" + ("" if not low else "; below: " +
                                    ", ".join(f"{r['op']} {r['size_bytes']} "
                                              f"B {r[key]:.2f}" for r in low)))


def print_fast_targets(rows, lat):
    """Issue 18's targets: how many points reach the goal, per rank count,
    in separate runs (x_mpi) and in the paired run (x_pair)."""
    print("\n## Issue 18: points with spcoll busbw >= goal x Open MPI's, "
          "every size")
    print_goal(rows, "x_mpi", "separate runs (each side's best draw)")
    print_goal(rows, "x_pair", "the paired run (both in the same processes, "
               "in turn; up to BENCH_PAIR_BYTES)")
    for l in lat:
        p50 = num(l, "p50_us")
        print(f"  {l['op']} 8 B p50 {fmt(p50, '.2f')} us (goal <= 2): "
              f"{'met' if p50 is not None and p50 <= 2 else 'MISSED'}")


def print_targets(tg):
    print("\n## Targets (sizes >= 16 MiB per rank; benchmarks report, they "
          "do not assert)")
    for t in tg:
        where = (f"{t['ranks']} ranks {t['size_bytes'] >> 20} MiB"
                 if t["ranks"] else "2 ranks")
        if t["value"] is None:
            print(f"  {t['target']:<55} {where:<20} no baseline row")
            continue
        state = "met" if t["met"] else "MISSED"
        print(f"  {t['target']:<55} {where:<20} {t['value']:8.2f} "
              f"(goal {'<=' if 'p50' in t['target'] else '>='} "
              f"{t['goal']:g}) {state}")


def write_summary(out, rows, tg, lat, ucx_lat):
    keys = list(rows[0].keys()) if rows else []
    with open(os.path.join(out, "summary.csv"), "w") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if v is None else v) for k, v in r.items()})
    machine = ""
    try:
        with open(os.path.join(out, "machine.txt")) as f:
            machine = f.read()
    except OSError:
        pass
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump({"machine": machine, "rows": rows, "latency": lat,
                   "ucx_latency": ucx_lat, "targets": tg}, f, indent=1)


def series(out, name, pts):
    path = os.path.join(out, "plot", name + ".dat")
    with open(path, "w") as f:
        for x, y in pts:
            f.write(f"{x} {y}\n")
    return path


def plot(out, rows, src, ucx):
    if shutil.which("gnuplot") is None:
        print("# no gnuplot (Debian gnuplot-nox): no PNG")
        return []
    os.makedirs(os.path.join(out, "plot"), exist_ok=True)
    pngs = []
    for ranks in sorted({r["ranks"] for r in rows}):
        plots = []
        for op in OPS:
            lines = []
            for name, title, style in (
                    ("spcoll", "spcoll", "lw 2 lc rgb '#1f77b4'"),
                    ("mpi", "Open MPI", "lc rgb '#d62728'"),
                    ("mpi_tuned", "Open MPI, mmap threshold raised",
                     "dt 2 lc rgb '#d62728'"),
                    ("gloo", "gloo", "lc rgb '#2ca02c'")):
                pts = sorted((k[2], busbw(r)) for k, r in src[name].items()
                             if k[0] == op and k[1] == ranks)
                if pts:
                    p = series(out, f"{name}_{op}_{ranks}", pts)
                    lines.append(f"'{p}' using 1:2 with linespoints title "
                                 f"'{title}' {style}")
            upts = sorted((s, busbw(r)) for s, r in ucx.items())
            if upts:
                p = series(out, "ucx_tag_bw", upts)
                lines.append(f"'{p}' using 1:2 with lines title 'ucx tag_bw "
                             f"(TCP loopback, cross-node ceiling)' dt 3 "
                             f"lc rgb 'gray40'")
            if lines:
                plots.append(f"set title '{op}, {ranks} ranks'\n"
                             f"plot " + ", \\\n  ".join(lines))
        eff = []
        for op in OPS:
            pts = sorted((r["size_bytes"], r["copy_efficiency"]) for r in rows
                         if r["ranks"] == ranks and r["op"] == op
                         and r["copy_efficiency"] is not None)
            if pts:
                p = series(out, f"eff_{op}_{ranks}", pts)
                eff.append(f"'{p}' using 1:2 with linespoints title '{op}'")
        if eff:
            plots.append(f"set title 'spcoll copy efficiency, {ranks} "
                         f"ranks'\nset ylabel 'written / time / memcpyT'\n"
                         f"unset logscale y\nset yrange [0:*]\n"
                         f"plot " + ", \\\n  ".join(eff))
        png = os.path.join(out, f"busbw_ranks{ranks}.png")
        gp = os.path.join(out, "plot", f"busbw_ranks{ranks}.gp")
        with open(gp, "w") as f:
            f.write(f"set terminal pngcairo size 1500,900 font ',9' "
                    f"noenhanced\n"
                    f"set output '{png}'\n"
                    f"set multiplot layout 2,3\n"
                    f"set logscale xy\nset format x '%.0s%cB'\n"
                    f"set format y '%g'\n"
                    f"set xlabel 'size (nccl-tests)'\n"
                    f"set ylabel 'busbw (GB/s)'\nset grid\n"
                    f"set key bottom right font ',7'\n")
            f.write("\n".join(plots) + "\nunset multiplot\n")
        rc = subprocess.run(["gnuplot", gp], capture_output=True, text=True)
        if rc.returncode != 0:
            print(f"# gnuplot {gp} failed: {rc.stderr.strip()}")
            continue
        pngs.append(png)
    return pngs


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = sys.argv[1]
    src, ucx, ucx_lat, lat = load(out)
    rows = merge(src, ucx)
    if not rows:
        print(f"bench_report: no spcoll rows under {out}", file=sys.stderr)
        return 1
    print_tables(rows)
    if lat:
        print("\n## Latency: 8 B ops between 2 ranks")
        for l in lat:
            held = sum(float(l[k]) for k in ("wait_share", "plan_share",
                                             "move_share"))
            where = ("shared-memory fast path: the daemon held none"
                     if held == 0 and float(l["socket_share"]) >= 0.999 else
                     f"through the daemon; shares of the mean: socket "
                     f"{float(l['socket_share']):.0%}, matching "
                     f"{float(l['wait_share']):.0%}, planning "
                     f"{float(l['plan_share']):.0%}, moving "
                     f"{float(l['move_share']):.0%}")
            print(f"  {l['op']:<15} p50 {float(l['p50_us']):6.2f} us  p99 "
                  f"{float(l['p99_us']):6.1f} us  {where}")
    for u in ucx_lat:
        print(f"  ucx_perftest tag_lat 8 B round trip (TCP loopback): p50 "
              f"{float(u['p50_us']):.1f} us")
    tg = targets(rows, lat)
    print_targets(tg)
    print_fast_targets(rows, lat)
    write_summary(out, rows, tg, lat, ucx_lat)
    pngs = plot(out, rows, src, ucx)
    print(f"\n# wrote {out}/summary.csv, {out}/summary.json"
          + "".join(f", {p}" for p in pngs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
