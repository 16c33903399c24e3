#!/usr/bin/env python3
"""The layer check (docs/architecture.md), over the includes and the calls
of the daemon's sources. Exit 0 when every rule holds; else each broken
rule with the file that breaks it.

  1. Movers are below the op layer: no engine or mover file includes,
     directly or through other headers, op.h, group.h or session.h.
  2. The op layer reaches engines only through the table: no other daemon
     file calls a function defined in an engine or mover file (engine.c,
     the table itself, and op_engine.c, the op layer's side of it, aside).
  3. Headers include one another without a loop.
  4. No dependency loop spans folders: over the daemon's folders, an edge
     A -> B for each file of A that includes a header of B or calls an
     spd_ function defined in B (definitions found by scanning B's
     sources); that graph is acyclic. Calls up the layers go through
     hooks (function pointers the layer above sets at start), which are
     no edge.
  5. UCX stays in the transport: only daemon/peer's files include UCX's
     headers (<ucp/...>, <ucs/...>, <uct/...>), and not peer.h, the header
     the rest of the daemon includes.
  6. Pure code stays pure: no file of kernels/ includes, directly or
     through other headers, a header of daemon/ or client/.
  9. The client stands on kernels/ and proto/ alone: no file of client/
     includes, directly or through other headers, a header of daemon/;
     and the fast path's private headers (client_fast_internal.h,
     client_fast_tune.h) are included only by the fast path's own files
     (client/fast/): the rest of the client reaches it through
     client_fast.h.

  10. The client's calls: client_base.c (a client's error, a tensor's
     bytes and data) calls no other function of the client, and the fast
     path's files (client/fast/) call, of the rest of the client, only
     what client_base.c defines; so the fast path stands below the
     connection, buffers, GPU and op code, in no call loop with them.
     The loop those four still make among themselves is listed in
     CLIENT_LOOP, which may only shrink (loops inside the fast path, one
     component, are its own).

  11. daemon/core has a direction: its files are in CORE_LAYERS, top
     first (the lifecycle and the clients' requests, then groups, then
     ops, then the records and frames out every layer uses); a call from
     a file to a function defined in a file of a higher layer is an
     error unless CORE_UP lists that pair of files with why. Calls up go
     through hooks (spd_core_up, done callbacks), which are no call.
     CORE_UP may only shrink; a core file in no layer is an error.
  12. The fast path is one component: of the daemon, only daemon/fast/
     (its row of the engine table) includes, directly or through other
     headers, the shared segment's headers (kernels/fast_*.h) or its own
     private one (fast_internal.h); the rest reaches it through the
     table's group hooks. kernels/fast_tune.h is not the segment but the
     fast path's settings, which the daemon's config lists.
  13. Every access to a word the fast path shares goes through
     kernels/fast_atomic.h (SPK_LOAD, SPK_STORE, ...), the one place the
     protocol checker intercepts them: no __atomic builtin in
     client/fast/, daemon/fast/ or kernels/fast_*.h but fast_atomic.h.

EXCEPTIONS lists what still breaks rules 1-3, FOLDER_EXCEPTIONS the
edges rule 4 leaves out, each with why; both may only shrink: an
exception no longer needed is an error too, so the lists stay true."""
import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIRS = ["daemon", "kernels", "client", "proto"]
CORE_HEADERS = {"op.h", "group.h", "session.h"}
# The fast path's tunables: settings rows the config includes (rule 12).
FAST_TUNE = "kernels/fast_tune.h"
TABLE = {"engine.c", "engine.h", "engine_group.c", "op_engine.c", "op_engine.h"}

# (rule, file name) -> why; file names are unique across daemon/.
EXCEPTIONS = {
}

# Engine functions any daemon file may still call (rule 2), each with why.
ALLOWED_CALLS = {
}

# (folder, header of another folder) -> why: include edges rule 4 leaves
# out. None now: the context (daemon/context/) depends on no layer.
FOLDER_EXCEPTIONS = {
}


# daemon/core's layers, top first (rule 11): file names of daemon/core.
CORE_LAYERS = [
    ("lifecycle and requests",
     {"server.c", "shutdown.c", "watchdog.c", "control.c", "upgrade.c",
      "reload.c",
      "session.c",
      "session_dispatch.c", "session_guard.c", "session_buffer.c",
      "session_ring.c"}),
    ("groups", {"group.c", "group_split.c", "group_peer.c"}),
    ("ops", {"op.c", "op_p2p.c", "op_p2p_peer.c", "op_peer.c", "op_overlap.c",
             "op_engine.c", "op_plan.c"}),
    ("records and frames out",
     {"buffer.c", "group_state.c", "session_out.c", "sd.c", "config.c",
      "config_fast.c", "config_limits.c", "config_peers.c"}),
]

# (caller, callee) -> why: calls up CORE_LAYERS (rule 11) still made by
# name. May only shrink.
CORE_UP = {
    ("op.c", "group.c"):
        "an op's end starts the group's next op, fails its queue or frees "
        "the group: the group owns its queue of ops (kick, fail_pending, "
        "maybe_free)",
    ("op_p2p.c", "group.c"):
        "a point-to-point run's end fails the group's queue or frees the "
        "group, as op.c's",
    ("op_p2p_peer.c", "group.c"):
        "a cross-node pair's end frees the group, as op.c's",
    ("op_peer.c", "group.c"):
        "a cross-node op's failure starts the group's next op, as op.c's",
    ("op_peer.c", "group_peer.c"):
        "a cross-node op asks the group's node set and reports a refused "
        "peer",
    ("op_p2p_peer.c", "group_peer.c"):
        "a cross-node pair reports a refused peer",
    ("op_plan.c", "group_peer.c"):
        "an op whose plan failed is reported to the other nodes",
    ("session_out.c", "session_guard.c"):
        "a client that does not read its replies is doomed: closed later "
        "from the loop, never from the sender's stack",
}


def read(path):
    with open(os.path.join(ROOT, path)) as f:
        return f.read()


def definitions(paths, prefix):
    """{function name: file} for the functions named prefix* that the
    sources among paths define."""
    pattern = re.compile(r"^(?:[a-z_][\w \*]*?[\s\*])(%s\w+)\s*\([^;]*?\)\s*\{"
                         % prefix, re.M | re.S)
    out = {}
    for p in paths:
        if p.endswith(".c"):
            for name in pattern.findall(read(p)):
                out[name] = p
    return out


def called(path, prefix):
    """The functions named prefix* that path calls."""
    return set(re.findall(r"\b(%s\w+)\s*\(" % prefix, read(path)))


def call_graph(srcs, prefix, key=lambda p: p):
    """{key(file): {key(file) it calls a prefix* function of}} over srcs."""
    defined = definitions(srcs, prefix)
    return {key(p): {key(defined[n]) for n in called(p, prefix)
                     if n in defined and defined[n] != p} for p in srcs}


def core_calls(files):
    """{core file name: {core file name it calls a function of}}."""
    srcs = [p for p in files if p.startswith("daemon/core/") and p.endswith(".c")]
    return call_graph(srcs, "spd_", os.path.basename)


def core_direction(files, broken):
    """Rule 11 over core_calls; the number of calls down."""
    layer = {}
    for i, (_, names) in enumerate(CORE_LAYERS):
        for n in names:
            layer[n] = i
    calls, used, down = core_calls(files), set(), 0
    for me in sorted(calls):
        if me not in layer:
            broken.append("rule 11: daemon/core/%s is in no layer of "
                          "CORE_LAYERS: place it" % me)
            continue
        for callee in sorted(calls[me]):
            if callee not in layer or layer[callee] >= layer[me]:
                down += 1
            elif (me, callee) in CORE_UP:
                used.add((me, callee))
            else:
                broken.append("rule 11: daemon/core/%s (%s) calls up into %s "
                              "(%s): go through a hook" % (
                                  me, CORE_LAYERS[layer[me]][0], callee,
                                  CORE_LAYERS[layer[callee]][0]))
    for key in sorted(set(CORE_UP) - used):
        broken.append("rule 11: %s -> %s is in CORE_UP but no such call up "
                      "now: remove it" % key)
    return down


def is_engine(path):
    """An engine or mover file: daemon/engine/ but the table itself, and
    daemon/fast/, the fast path's row (or, in a flat daemon/, engine* and
    mover_* files)."""
    base = os.path.basename(path)
    if base in TABLE or not path.startswith("daemon/"):
        return False
    if path.startswith("daemon/engine/") or path.startswith("daemon/fast/"):
        return True
    return os.path.dirname(path) == "daemon" and (
        base.startswith("engine") or base.startswith("mover_"))


def sources():
    out = []
    for d in DIRS:
        for ext in ("*.c", "*.h"):
            out += sorted(glob.glob(os.path.join(ROOT, d, "**", ext), recursive=True))
    return [os.path.relpath(p, ROOT) for p in out]


def includes(path, by_name):
    names = re.findall(r'^\s*#\s*include\s+"([^"]+)"', read(path), re.M)
    here = os.path.dirname(path)
    out = []
    for n in names:
        cand = os.path.normpath(os.path.join(here, n))
        if os.path.exists(os.path.join(ROOT, cand)):
            out.append(cand)
        elif os.path.basename(n) in by_name:
            out.append(by_name[os.path.basename(n)])
    return out


# The client's files that still call one another in a loop (rule 10
# reports a loop with any other file, and an entry no longer in one).
CLIENT_LOOP = {
    "client_buffer.c", "client_conn.c", "client_gpu.c",
    "client_gpu_driver.c", "client_gpu_flags.c", "client_gpu_op.c",
    "client_gpu_sym.c", "client_gpu_sym_kernel.c", "client_gpu_sym_op.c",
    "client_op.c", "client_wrap.c",
}


# The client's fast path, one component (rules 9 and 10).
FAST_DIR = "client/fast"


def is_fast(path):
    return os.path.dirname(path) == FAST_DIR


def client_calls(files):
    """{client file: {client file it calls a function of}}, over spc_ and
    spc__ functions defined in client/*.c and client/fast/*.c."""
    return call_graph([p for p in files if p.endswith(".c") and
                       os.path.dirname(p) in ("client", FAST_DIR)], "spc_")


def call_loops(graph):
    """The strongly connected parts of graph with more than one file."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                out.append(sorted(part))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def folder_edges(files, inc, used):
    """{(folder A, folder B): [why]} over the daemon's folders: A's file
    includes a header of B, or calls an spd_ function B's sources define.
    Edges in FOLDER_EXCEPTIONS are left out (and noted in used)."""
    daemon = [p for p in files if p.startswith("daemon/")]
    defined = definitions(daemon, "spd_")
    edges = {}
    for p in daemon:
        a = os.path.dirname(p)
        for h in inc.get(p, []):
            b = os.path.dirname(h)
            if not h.startswith("daemon/") or a == b:
                continue
            if (a, h) in FOLDER_EXCEPTIONS:
                used.add((a, h))
                continue
            edges.setdefault((a, b), []).append("%s includes %s" % (p, h))
        if p.endswith(".c"):
            for n in sorted(called(p, "spd_")):
                b = os.path.dirname(defined[n]) if n in defined else a
                if b != a:
                    edges.setdefault((a, b), []).append(
                        "%s calls %s (%s)" % (p, n, defined[n]))
    return edges


def folder_loop(files, inc, used):
    """A loop of the folder graph as text ("A -> B (why) -> A"), or ""."""
    edges = folder_edges(files, inc, used)
    succ = {}
    for a, b in edges:
        succ.setdefault(a, []).append(b)
    state = {}

    def visit(f, stack):
        state[f] = 1
        for n in sorted(succ.get(f, [])):
            if state.get(n) == 1:
                cyc = stack[stack.index(n):] + [n]
                return " -> ".join(
                    "%s (%s)" % (x, edges[(x, y)][0])
                    for x, y in zip(cyc, cyc[1:])) + " -> " + n
            if n not in state:
                found = visit(n, stack + [n])
                if found:
                    return found
        state[f] = 2
        return ""

    for f in sorted(succ):
        if f not in state:
            found = visit(f, [f])
            if found:
                return found
    return ""


def main():
    files = sources()
    by_name = {os.path.basename(p): p for p in files if p.endswith(".h")}
    inc = {p: includes(p, by_name) for p in files}
    broken, used = [], set()

    def closure(p):
        seen, todo = set(), list(inc.get(p, []))
        while todo:
            h = todo.pop()
            if h not in seen:
                seen.add(h)
                todo += inc.get(h, [])
        return seen

    def report(rule, path, msg):
        key = (rule, os.path.basename(path))
        if key in EXCEPTIONS:
            used.add(key)
        else:
            broken.append("rule %d: %s: %s" % (rule, path, msg))

    # 1. engines below the op layer
    for p in files:
        if is_engine(p):
            bad = sorted(os.path.basename(h) for h in closure(p)
                         if os.path.basename(h) in CORE_HEADERS)
            if bad:
                report(1, p, "includes " + ", ".join(bad))

    # 2. engine functions called only through the table
    defined = definitions([p for p in files if is_engine(p)], "spd_")
    for p in files:
        if not p.startswith("daemon/") or not p.endswith(".c") or is_engine(p) \
                or os.path.basename(p) in TABLE:
            continue
        hits = sorted({n for n in called(p, "spd_")
                       if n in defined and n not in ALLOWED_CALLS})
        if hits:
            report(2, p, "calls " + ", ".join("%s (%s)" % (n, defined[n]) for n in hits))

    # 3. no include loop among headers
    state = {}

    def visit(h, stack):
        state[h] = 1
        for n in inc.get(h, []):
            if not n.endswith(".h"):
                continue
            if state.get(n) == 1:
                loop = stack[stack.index(n):] + [n] if n in stack else [h, n]
                broken.append("rule 3: include loop: " + " -> ".join(loop))
            elif n not in state:
                visit(n, stack + [n])
        state[h] = 2

    for h in sorted(p for p in files if p.endswith(".h")):
        if h not in state:
            visit(h, [h])

    # 4. no loop across folders
    folder_used = set()
    loop = folder_loop(files, inc, folder_used)
    if loop:
        broken.append("rule 4: dependency loop across folders: " + loop)
    for key in sorted(set(FOLDER_EXCEPTIONS) - folder_used):
        broken.append("rule 4: %s -> %s: listed in FOLDER_EXCEPTIONS but no "
                      "such include now: remove it" % key)

    # 5. UCX below peer.h
    for p in files:
        if re.search(r"^\s*#\s*include\s+<uc[pst]/", read(p), re.M) and (
                not p.startswith("daemon/peer/") or
                os.path.basename(p) == "peer.h"):
            broken.append("rule 5: %s includes a UCX header: only the peer "
                          "transport's files (not peer.h) may" % p)

    # 6. kernels/ pure
    for p in files:
        if p.startswith("kernels/"):
            bad = sorted(h for h in closure(p)
                         if h.startswith("daemon/") or h.startswith("client/"))
            if bad:
                broken.append("rule 6: %s includes %s: kernels/ is pure code"
                              % (p, ", ".join(bad)))

    # 9. the client over kernels/ and proto/; its fast path behind client_fast.h
    fast_private = {"client_fast_internal.h", "client_fast_tune.h"}
    for p in files:
        if not p.startswith("client/"):
            continue
        bad = sorted(h for h in closure(p) if h.startswith("daemon/"))
        if bad:
            broken.append("rule 9: %s includes %s: the client stands on "
                          "kernels/ and proto/ only" % (p, ", ".join(bad)))
        if is_fast(p):
            continue
        priv = sorted(os.path.basename(h) for h in inc.get(p, [])
                      if os.path.basename(h) in fast_private)
        if priv:
            broken.append("rule 9: %s includes %s: the rest of the client "
                          "reaches the fast path through client_fast.h"
                          % (p, ", ".join(priv)))

    # 10. the client's calls
    calls = client_calls(files)
    base = "client/client_base.c"
    for callee in sorted(calls.get(base, ())):
        broken.append("rule 10: %s calls into %s: it uses nothing of the "
                      "client" % (base, callee))
    for p, callees in sorted(calls.items()):
        if not is_fast(p):
            continue
        up = sorted(c for c in callees if c != base and not is_fast(c))
        if up:
            broken.append("rule 10: %s calls into %s: the fast path uses, of "
                          "the rest of the client, only client_base.c"
                          % (p, ", ".join(up)))
    in_loops = set()
    for part in call_loops(calls):
        names = {os.path.basename(p) for p in part}
        if all(is_fast(p) for p in part):
            continue  # within the fast path, one component
        in_loops |= names
        if not names <= CLIENT_LOOP:
            broken.append("rule 10: a call loop in the client: %s"
                          % ", ".join(sorted(names)))
    for name in sorted(CLIENT_LOOP - in_loops):
        broken.append("rule 10: %s is in CLIENT_LOOP but in no call loop "
                      "now: remove it" % name)

    # 11. daemon/core's direction
    core_down = core_direction(files, broken)

    # 12. the fast path behind the table; its tunables are settings rows
    # (config.h lists them), not the segment
    for p in files:
        if not p.startswith("daemon/") or p.startswith("daemon/fast/"):
            continue
        bad = sorted(os.path.basename(h) for h in closure(p)
                     if os.path.basename(h) == "fast_internal.h" or
                     (h.startswith("kernels/fast_") and h.endswith(".h") and
                      h != FAST_TUNE))
        if bad:
            broken.append("rule 12: %s includes %s: the daemon reaches the "
                          "fast path through the engine table" % (p, ", ".join(bad)))

    # 13. the fast path's shared words through fast_atomic.h
    for p in files:
        fast = p.startswith("client/fast/") or p.startswith("daemon/fast/") or (
            p.startswith("kernels/fast_") and p != "kernels/fast_atomic.h")
        if fast and re.search(r"\b__atomic_\w+\s*\(", read(p)):
            broken.append("rule 13: %s uses an __atomic builtin: the fast "
                          "path's shared words go through fast_atomic.h" % p)

    for name in sorted(set(ALLOWED_CALLS) - set(defined)):
        broken.append("rule 2: %s is allowed but no engine file defines it now: "
                      "remove it from ALLOWED_CALLS" % name)
    for key in sorted(set(EXCEPTIONS) - used):
        broken.append("rule %d: %s: listed as an exception but keeps the rule now: "
                      "remove it from EXCEPTIONS" % key)
    for b in broken:
        print("FAIL layers: " + b)
    if broken:
        return 1
    print("PASS layers: %d engine files below the op layer, table-only calls, "
          "no include loop, no loop across %d folders, UCX in the transport, "
          "kernels/ pure, the client on kernels/ and its fast path behind "
          "client_fast.h and below the rest of the client, daemon/core in %d "
          "layers (%d calls down or within a layer, %d listed up), the "
          "daemon's fast path in daemon/fast/, its shared words through "
          "fast_atomic.h (%d known exceptions, "
          "%d allowed calls, %d folder exceptions)" % (
              sum(1 for p in files if is_engine(p)),
              len({os.path.dirname(p) for p in files if p.startswith("daemon/")}),
              len(CORE_LAYERS), core_down, len(CORE_UP),
              len(used), len(ALLOWED_CALLS), len(folder_used)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
