#!/usr/bin/env python3
"""An analytic model of one cross-node all_to_all and one all_gather in
spcoll (issue 17): messages and bytes per node pair with and without node
aggregation, plan memory per daemon (whole plans against per-node plans),
and where the time goes on a given fabric.

What it models, from the code (kernels/plan_cut.h, daemon/engine/engine_ucx.c):
- With node aggregation (spcoll today): every (node pair, direction, phase)
  is one stream, one UCX message; a source span goes to a node once, and
  the node copies it on to each local rank that needs it.
- Without aggregation (what per-rank-pair transports do): one message per
  (source rank, destination rank) pair, each rank's data sent once per
  remote rank that needs it.
- Plan memory: an spk_move is MOVE_BYTES; a whole plan holds every move of
  the job (world^2 for an all_to_all, world^2 for an all_gather); a
  per-node plan holds the moves that read or write its own ranks
  (2 * R * world - R^2).

Time = the node's egress bytes / fabric bandwidth + messages * per-message
cost + moves * plan cost per move (building the plan) + the local copies
at memory bandwidth. Every parameter is an option; the defaults say where
they come from. It prints numbers; it asserts nothing.

usage: scale_model.py [--nodes 1000] [--ranks-per-node 8]
                      [--a2a-bytes B] [--ag-bytes B] [--fabric-gbps 400] ...
"""
import argparse
import math

MOVE_BYTES = 248  # sizeof(spk_move) on x86-64 (kernels/plan.h)
CHUNK = 1 << 20   # SPD_PEER_CHUNK (daemon/peer/peer.h): a message's most


def model(op, n, r, s, a):
    """One op: n nodes, r ranks per node, s input bytes per rank."""
    w = n * r
    out = {}
    if op == "all_to_all":
        pair_bytes = r * r * s / w          # one direction, either way
        out["pair_bytes_agg"] = out["pair_bytes_noagg"] = pair_bytes
        out["egress_agg"] = out["egress_noagg"] = pair_bytes * (n - 1)
        whole_moves = w * w
        local_bytes = r * r * s / w         # copies that stay on the node
    else:  # all_gather: each rank's s goes to every rank
        out["pair_bytes_agg"] = r * s       # a span goes to a node once
        out["pair_bytes_noagg"] = r * r * s
        out["egress_agg"] = r * s * (n - 1)
        out["egress_noagg"] = r * r * s * (n - 1)
        whole_moves = w * w
        local_bytes = r * w * s             # every local output, whole
    # A stream travels as messages of at most CHUNK bytes (SPD_PEER_CHUNK).
    per_rank_pair = out["pair_bytes_noagg"] / (r * r)
    out["msgs_pair_agg"] = max(1, math.ceil(out["pair_bytes_agg"] / CHUNK))
    out["msgs_pair_noagg"] = r * r * max(1, math.ceil(per_rank_pair / CHUNK))
    out["msgs_node_agg"] = out["msgs_pair_agg"] * (n - 1)
    out["msgs_node_noagg"] = out["msgs_pair_noagg"] * (n - 1)
    node_moves = 2 * r * w - r * r
    out["plan_whole_bytes"] = whole_moves * MOVE_BYTES
    out["plan_node_bytes"] = node_moves * MOVE_BYTES
    bw = a.fabric_gbps * 1e9 / 8
    for kind in ("agg", "noagg"):
        t_wire = out["egress_" + kind] / bw
        t_msgs = out["msgs_node_" + kind] * a.msg_us * 1e-6
        out["t_wire_" + kind] = t_wire
        out["t_msgs_" + kind] = t_msgs
    out["t_plan_whole"] = whole_moves * a.plan_ns_per_move * 1e-9
    out["t_plan_node"] = node_moves * a.plan_ns_per_move * 1e-9
    out["t_local"] = local_bytes / (a.mem_gbs * 1e9)
    return out


def human(b):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(b) < 1024:
            return "%.1f %s" % (b, unit)
        b /= 1024
    return "%.1f PiB" % b


def ms(t):
    return "%.3f ms" % (t * 1e3) if t < 1 else "%.2f s" % t


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--ranks-per-node", type=int, default=8)
    p.add_argument("--a2a-bytes", type=float, default=64 * 2**20,
                   help="all_to_all input bytes per rank (64 MiB: a "
                        "long-context Ulysses exchange)")
    p.add_argument("--ag-bytes", type=float, default=64 * 2**10,
                   help="all_gather input bytes per rank (64 KiB: its "
                        "output is world times that on every rank)")
    p.add_argument("--fabric-gbps", type=float, default=400,
                   help="per-node injection bandwidth, Gb/s (400)")
    p.add_argument("--msg-us", type=float, default=2.0,
                   help="per-message cost at the sender, us (2: a UCX "
                        "rendezvous send's software overhead, order of)")
    p.add_argument("--plan-ns-per-move", type=float, default=140,
                   help="plan build and cut per move, ns (140: "
                        "spcoll-plan-bench, a whole 1024-rank all_to_all, "
                        "1 M moves in 146 ms; docs/performance.md)")
    p.add_argument("--mem-gbs", type=float, default=20,
                   help="local copy bandwidth, GB/s (20)")
    a = p.parse_args()
    n, r = a.nodes, a.ranks_per_node
    print("# %d nodes x %d ranks (world %d), %g Gb/s per node" %
          (n, r, n * r, a.fabric_gbps))
    for op, s in (("all_to_all", a.a2a_bytes), ("all_gather", a.ag_bytes)):
        m = model(op, n, r, s, a)
        print("\n## %s, %s in per rank" % (op, human(s)))
        print("| | with node aggregation (spcoll) | without |")
        print("|---|---|---|")
        print("| messages per node pair, one way | %d | %d |" %
              (m["msgs_pair_agg"], m["msgs_pair_noagg"]))
        print("| bytes per node pair, one way | %s | %s |" %
              (human(m["pair_bytes_agg"]), human(m["pair_bytes_noagg"])))
        print("| messages a node sends | %d | %d |" %
              (m["msgs_node_agg"], m["msgs_node_noagg"]))
        print("| bytes a node sends | %s | %s |" %
              (human(m["egress_agg"]), human(m["egress_noagg"])))
        print("| wire time (egress / fabric) | %s | %s |" %
              (ms(m["t_wire_agg"]), ms(m["t_wire_noagg"])))
        print("| per-message time | %s | %s |" %
              (ms(m["t_msgs_agg"]), ms(m["t_msgs_noagg"])))
        print("| local copies (memory bandwidth) | %s | |" % ms(m["t_local"]))
        print("\n| plan per daemon | whole plan (before issue 17) | per-node plan (spcoll) |")
        print("|---|---|---|")
        print("| memory | %s | %s |" %
              (human(m["plan_whole_bytes"]), human(m["plan_node_bytes"])))
        print("| build time | %s | %s |" %
              (ms(m["t_plan_whole"]), ms(m["t_plan_node"])))


if __name__ == "__main__":
    main()
