"""Single-process behaviour (run in one forked process): memory pool reuse
and growth, client lifetime, threads sharing a client, two clients of one
process in one group, error reporting. Returns {name: [failures]}."""
import os
import threading
import traceback

import torch

import spcoll
from spcoll import ops


def _pool_reuse(sock, fails):
    c = spcoll.connect(sock, arena_bytes=1 << 20)
    a = c.empty([1000])
    p = a.data_ptr()
    del a
    b = c.empty([1000])
    if b.data_ptr() != p:
        fails.append("a freed block was not reused")
    n = len(c.pool._arenas)
    big = c.empty([1 << 19])            # 2 MiB: its own arena
    if len(c.pool._arenas) != n + 1:
        fails.append("a tensor larger than an arena got no arena of its own")
    big.fill_(3)
    g = c.join("solo-pool", 1, 0)
    out = ops.all_gather(big, g, 0)     # staged? no: big is in spcoll memory
    if not (torch.equal(out, big) and c.staging_stats()[0] == 0):
        fails.append("an op on an oversized-arena tensor went wrong")
    del big, out
    c.empty([1])                        # the next allocation returns it
    if len(c.pool._arenas) != n:
        fails.append("an empty oversized arena was kept (%d arenas, want %d)"
                     % (len(c.pool._arenas), n))
    del b
    g.leave()
    c.trim()
    if c.pool._arenas:
        fails.append("trim() kept %d unused arena(s)" % len(c.pool._arenas))
    c.close()


def _lifetime(sock, fails):
    c = spcoll.connect(sock)
    g = c.join("solo-life", 1, 0)
    y = ops.all_gather(torch.ones(3), g, 0)
    try:
        c.close()
        fails.append("close() ran under a live tensor")
    except RuntimeError as e:
        if "still alive" not in str(e):
            fails.append("close refusal says: %s" % e)
    del y
    c.close()
    try:
        ops.all_gather(torch.ones(3), g, 0)
        fails.append("an op on a closed client ran")
    except RuntimeError as e:
        if "closed" not in str(e):
            fails.append("op after close says: %s" % e)
    c2 = spcoll.connect(sock)
    g2 = c2.join("solo-leave", 1, 0)
    g2.leave()
    try:
        ops.all_reduce(torch.ones(2), g2)
        fails.append("an op on a left group ran")
    except RuntimeError as e:
        if "was left" not in str(e):
            fails.append("op after leave says: %s" % e)
    # a tensor keeps its client's memory mapped after the last reference
    # to the client is gone
    c3 = spcoll.connect(sock)
    t = c3.zeros([16])
    del c3
    t += 1
    if t.sum().item() != 16:
        fails.append("a tensor outliving its client's last reference broke")


def _threads_one_client(sock, fails):
    c = spcoll.connect(sock)
    g = c.join("solo-threads", 1, 0)
    errs = []

    def work(k):
        try:
            for i in range(40):
                x = torch.full([5, k + 1], float(i * 10 + k))
                y = ops.all_gather(x, g, 1)
                if not torch.equal(y, x):
                    errs.append("thread %d iteration %d: wrong result" % (k, i))
        except Exception:
            errs.append(traceback.format_exc())
    ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    fails.extend(errs)
    if any(t.is_alive() for t in ts):
        fails.append("threads sharing a client hung")


def _two_clients_one_group(sock, fails):
    """Rank 0 and rank 1 in two threads of one process: a blocking op must
    release the GIL or the other rank could never arrive."""
    out = [None, None]

    def rank(r):
        try:
            c = spcoll.connect(sock)
            g = c.join("solo-pair", 2, r)
            out[r] = ops.all_gather(torch.full([2], float(r)), g, 0).clone()
            g.leave()
        except Exception:
            out[r] = traceback.format_exc()
    ts = [threading.Thread(target=rank, args=(r,)) for r in (0, 1)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    want = torch.tensor([0.0, 0.0, 1.0, 1.0])
    for r in (0, 1):
        if not (isinstance(out[r], torch.Tensor) and torch.equal(out[r], want)):
            fails.append("rank %d in a thread: %s" % (r, out[r]))


def _errors(sock, fails):
    try:
        spcoll.connect(sock + ".nope")
        fails.append("connect to a missing socket worked")
    except spcoll.SpcollError as e:
        if e.status_name != "SPC_ECONNECTION" or ".nope" not in str(e):
            fails.append("connect error: %s" % e)
    c = spcoll.connect(sock)
    try:
        c.join("solo-bad", 2, 5)
        fails.append("join as rank 5 of 2 worked")
    except ValueError as e:
        if "rank" not in str(e):
            fails.append("join error: %s" % e)
    for bad, why in (("solo\0bad", "NUL"), ("solo bad", "byte 0x20")):
        try:
            c.join(bad, 1, 0)
            fails.append("join of %r worked" % bad)
        except ValueError as e:
            if why not in str(e):
                fails.append("join %r error: %s" % (bad, e))
    g = c.join("solo-err", 1, 0)
    for what, call in (("grad_scale", lambda: spcoll.split_forward_gather_backward(
                            torch.ones(4), g, 0, None, "sideways")),
                       ("reduce op", lambda: ops.all_reduce(torch.ones(2), g, "avg")),
                       ("dtype", lambda: ops.all_gather(torch.ones(2, dtype=torch.complex64), g, 0)),
                       ("group type", lambda: ops.all_gather(torch.ones(2), "g", 0)),
                       ("keep_mask", lambda: spcoll.keep_mask(5, 1, 0, 0))):
        try:
            call()
            fails.append("bad %s accepted" % what)
        except (ValueError, TypeError):
            pass
    try:
        spcoll.ops.all_gather(torch.ones(2))
        if spcoll.get_sequence_parallel_group() is None:
            fails.append("no group and no SP group accepted")
    except ValueError as e:
        if "set_sequence_parallel_group" not in str(e):
            fails.append("missing group error: %s" % e)


def _forked_child(sock, fails):
    """A forked child cannot use its parent's client (it would write into
    the parent's socket) but can connect its own."""
    c = spcoll.connect(sock)
    g = c.join("solo-fork", 1, 0)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            try:
                ops.all_gather(torch.ones(2), g, 0)
                code = 1
            except RuntimeError as e:
                code = 0 if "forked process must connect" in str(e) else 2
            if code == 0:
                g2 = spcoll.connect(sock).join("solo-fork-child", 1, 0)
                ok = torch.equal(ops.all_gather(torch.ones(2), g2, 0), torch.ones(2))
                code = 0 if ok else 3
        except BaseException:
            code = 4
        os.write(w, bytes([code]))
        os._exit(0)
    os.close(w)
    code = os.read(r, 1)
    os.waitpid(pid, 0)
    if code != b"\x00":
        fails.append("forked child: code %r (1: used the parent's client, 2: wrong "
                     "message, 3/4: its own client failed)" % code)
    # the parent's client is untouched
    if not torch.equal(ops.all_gather(torch.ones(2), g, 0), torch.ones(2)):
        fails.append("the parent's client broke after the fork")


def run(rank, world, sock):
    torch.set_num_threads(1)
    out = {}
    for name, fn in (("forked_child_connects_its_own", _forked_child),
                     ("pool_reuse_and_growth", _pool_reuse), ("client_lifetime", _lifetime),
                     ("threads_share_a_client", _threads_one_client),
                     ("two_clients_one_group", _two_clients_one_group),
                     ("argument_errors", _errors)):
        fails = []
        try:
            fn(sock, fails)
        except Exception:
            fails.append("raised:\n" + traceback.format_exc())
        out[name] = fails
    return out


NAMES = ["forked_child_connects_its_own", "pool_reuse_and_growth", "client_lifetime", "threads_share_a_client",
         "two_clients_one_group", "argument_errors"]
