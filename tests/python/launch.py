"""Run a function on N rank processes, forked from the test process (torch
is imported once, not once per rank), and collect what each returns.

A rank that does not finish within `guard` seconds is killed: a hang guard,
not a timing check. A rank that died or hung reports an "__error__"."""
import multiprocessing
import os
import pickle
import time
import traceback


def _child(rank, world, fn, args, outdir):
    try:
        res = fn(rank, world, *args)
    except BaseException:
        res = {"__error__": "rank %d raised:\n%s" % (rank, traceback.format_exc())}
    tmp = os.path.join(outdir, "rank%d.tmp" % rank)
    with open(tmp, "wb") as f:
        pickle.dump(res, f)
    os.replace(tmp, os.path.join(outdir, "rank%d.pkl" % rank))


def run_ranks(world, fn, args, outdir, guard=150):
    os.makedirs(outdir, exist_ok=True)
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_child, args=(r, world, fn, args, outdir))
             for r in range(world)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + guard
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    hung = [r for r, p in enumerate(procs) if p.is_alive()]
    for r in hung:
        procs[r].kill()
        procs[r].join()
    out = []
    for r, p in enumerate(procs):
        path = os.path.join(outdir, "rank%d.pkl" % r)
        if os.path.exists(path):
            with open(path, "rb") as f:
                out.append(pickle.load(f))
        elif r in hung:
            out.append({"__error__": "rank %d hung: killed after %d s (ranks "
                        "still running: %s)" % (r, guard, hung)})
        else:
            out.append({"__error__": "rank %d died with exit code %s"
                        % (r, p.exitcode)})
    return out
