"""Checks of torch.distributed backend "spcoll": each collective, sync and
async, world and sub-groups, every dtype, against (1) a local reference
computed from every rank's input (each rank regenerates the others'
deterministic data) and (2) gloo on the same inputs where gloo has the op
and dtype. Run on every rank of one launch, in the same order everywhere;
mismatches are recorded, not raised, so all ranks keep issuing the same
ops."""
import functools
import hashlib
import os
import traceback

import torch
import torch.distributed as dist

import spcoll  # noqa: F401 (registers the backend)
import spcoll.distributed as sd

R = dist.ReduceOp
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16,
          torch.int8, torch.uint8, torch.int32, torch.int64, torch.bool]
CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn


class Ctx:
    def __init__(self, rank, world, gloo):
        self.rank, self.world, self.gloo = rank, world, gloo
        self.failures, self.compared, self.name = [], 0, ""
        self.gloo_compared, self.gloo_lacks = 0, []

    def data(self, r, shape, dtype, salt=0):
        key = repr((self.name, r, salt, tuple(shape), str(dtype))).encode()
        g = torch.Generator().manual_seed(
            int.from_bytes(hashlib.sha256(key).digest()[:6], "little"))
        if dtype == torch.bool:
            return torch.randint(0, 2, shape, generator=g).bool()
        if dtype.is_floating_point:
            return (torch.randint(-256, 256, shape, generator=g)
                    .double() / 64).to(dtype)
        lo = 0 if dtype == torch.uint8 else -20
        return torch.randint(lo, 20, shape, generator=g).to(dtype)

    def same(self, label, got, want, tol=False):
        self.compared += 1
        if got.shape != want.shape or got.dtype != want.dtype:
            self.failures.append("%s %s: got %s %s, want %s %s" % (
                self.name, label, got.dtype, tuple(got.shape), want.dtype,
                tuple(want.shape)))
            return
        atol = tol if isinstance(tol, float) else 1e-2
        ok = (torch.allclose(got.double(), want.double(), rtol=1e-2, atol=atol)
              if tol else torch.equal(got, want))
        if not ok:
            self.failures.append("%s %s: got %s, want %s" % (
                self.name, label, got.flatten()[:8].tolist(),
                want.flatten()[:8].tolist()))

    def vs_gloo(self, label, got, fn, tol=False):
        """Compare got with fn(), the same call on the gloo group; where
        gloo lacks the op or dtype (it raises before moving anything, on
        every rank alike) nothing is compared and the case is counted."""
        try:
            want = fn()
        except (RuntimeError, ValueError) as e:
            self.gloo_lacks.append("%s: %s" % (label, str(e).split("\n")[0][:80]))
            return
        self.gloo_compared += 1
        if tol is True:
            # 16-bit floats: gloo rounds every partial sum to 16 bits,
            # spcoll accumulates in fp32 and rounds once (it equals the
            # local reference exactly); inputs here are below 4 in
            # magnitude, sums of 4 below 16, where a bf16 step is 1/16
            tol = 0.125
        self.same("vs gloo " + label, got, want, tol)

    def true(self, label, cond):
        self.compared += 1
        if not cond:
            self.failures.append("%s %s" % (self.name, label))


def ref_reduce(xs, kind):
    """Every rank's tensors reduced in rank order (local reference)."""
    dt = xs[0].dtype
    if dt == torch.bool:
        f = {"sum": torch.logical_or, "max": torch.logical_or,
             "min": torch.logical_and, "product": torch.logical_and}[kind]
        return functools.reduce(f, xs)
    if kind in ("sum", "avg"):
        acc = torch.stack([x.double() if dt.is_floating_point else x.long()
                           for x in xs]).sum(0)
        if kind == "avg":
            return (acc / len(xs)).to(dt)
        return acc.to(dt)
    if kind == "max":
        return functools.reduce(torch.maximum, xs)
    if kind == "min":
        return functools.reduce(torch.minimum, xs)
    return functools.reduce(torch.mul, xs)


KINDS = {"sum": R.SUM, "max": R.MAX, "min": R.MIN, "product": R.PRODUCT,
         "avg": R.AVG}


def _kinds(dt):
    ks = ["sum", "max", "min", "product"]
    return ks + ["avg"] if dt.is_floating_point else ks


def _small(dt):
    return dt in (torch.float16, torch.bfloat16)


def _wait(w, async_op):
    if async_op:
        return w.wait()
    return None


@check
def all_reduce(c, g=None, ranks=None, gl=None):
    ranks = ranks or list(range(c.world))
    gl = gl if g is not None else c.gloo
    me = ranks.index(c.rank)
    for dt in DTYPES:
        for k in _kinds(dt):
            for a in (False, True):
                xs = [c.data(r, (5, 3), dt, k) for r in range(len(ranks))]
                t = xs[me].clone()
                w = dist.all_reduce(t, op=KINDS[k], group=g, async_op=a)
                if a:
                    c.true("async wait", w.wait() is True)
                c.same("%s %s async=%s" % (dt, k, a), t, ref_reduce(xs, k),
                       tol=k == "avg" and _small(dt))
                if gl is not None and not a:
                    def on_gloo():
                        u = xs[me].clone()
                        dist.all_reduce(u, op=KINDS[k], group=gl)
                        return u
                    c.vs_gloo("%s %s" % (dt, k), t, on_gloo, tol=_small(dt))


@check
def all_reduce_vs_gloo(c):
    for k in ("sum", "max", "min", "product"):
        x = c.data(c.rank, (33,), torch.float32, k)
        a, b = x.clone(), x.clone()
        dist.all_reduce(a, op=KINDS[k])
        dist.all_reduce(b, op=KINDS[k], group=c.gloo)
        c.same("gloo " + k, a, b, tol=True)


@check
def all_reduce_noncontiguous(c):
    xs = [c.data(r, (4, 6), torch.float32) for r in range(c.world)]
    t = xs[c.rank].clone().t()
    dist.all_reduce(t)
    c.same("transposed", t, ref_reduce([x.t() for x in xs], "sum"))


@check
def all_gather(c, g=None, ranks=None, gl=None):
    ranks = ranks or list(range(c.world))
    gl = gl if g is not None else c.gloo
    n, me = len(ranks), ranks.index(c.rank)
    for dt in DTYPES:
        for a in (False, True):
            xs = [c.data(r, (3, 2), dt) for r in range(n)]
            outs = [torch.zeros(3, 2, dtype=dt) for _ in range(n)]
            w = dist.all_gather(outs, xs[me], group=g, async_op=a)
            if a:
                fut = w.get_future().wait()
                c.true("future holds the outputs", len(fut) == 1 and
                       len(fut[0]) == n)
            for r in range(n):
                c.same("%s list[%d] async=%s" % (dt, r, a), outs[r], xs[r])
            if gl is not None and not a:
                def on_gloo():
                    o = [torch.zeros(3, 2, dtype=dt) for _ in range(n)]
                    dist.all_gather(o, xs[me], group=gl)
                    return torch.cat(o)
                c.vs_gloo("%s all_gather" % dt, torch.cat(outs), on_gloo)
            out = torch.zeros(n * 3, 2, dtype=dt)
            w = dist.all_gather_into_tensor(out, xs[me], group=g, async_op=a)
            _wait(w, a)
            c.same("%s into_tensor" % dt, out, torch.cat(xs))


@check
def all_gather_uneven_and_zero_copy(c):
    xs = [c.data(r, (r + 1, 2), torch.float32) for r in range(c.world)]
    outs = [torch.zeros(r + 1, 2) for r in range(c.world)]
    dist.all_gather(outs, xs[c.rank].t().contiguous().t())  # non-contiguous
    for r in range(c.world):
        c.same("uneven[%d]" % r, outs[r], xs[r])
    x = c.data(c.rank, (4,), torch.float32)
    out = sd.empty([4 * c.world])
    dist.all_gather_into_tensor(out, x)
    want = [torch.zeros(4) for _ in range(c.world)]
    dist.all_gather(want, x, group=c.gloo)   # gloo: no all_gather_into_tensor
    c.true("output in spcoll memory", sd.is_zero_copy(out))
    c.same("zero-copy output vs gloo", out, torch.cat(want))


@check
def reduce_scatter(c, g=None, ranks=None):
    ranks = ranks or list(range(c.world))
    gl = c.gloo if g is None else None
    n, me = len(ranks), ranks.index(c.rank)
    for dt in DTYPES:
        for k in (["sum", "max", "avg"] if dt.is_floating_point
                  else ["sum", "min", "product"]):
            for a in (False, True):
                sizes = [j + 1 for j in range(n)]      # uneven pieces
                ins = [[c.data(r, (s,), dt, (k, j)) for j, s in
                        enumerate(sizes)] for r in range(n)]
                out = torch.zeros(sizes[me], dtype=dt)
                w = dist.reduce_scatter(out, ins[me], op=KINDS[k], group=g,
                                        async_op=a)
                _wait(w, a)
                want = ref_reduce([ins[r][me] for r in range(n)], k)
                c.same("%s %s list async=%s" % (dt, k, a), out, want,
                       tol=k == "avg" and _small(dt))
                if gl is not None and not a:
                    def on_gloo():
                        u = torch.zeros(sizes[me], dtype=dt)
                        dist.reduce_scatter(u, ins[me], op=KINDS[k], group=gl)
                        return u
                    c.vs_gloo("%s %s reduce_scatter" % (dt, k), out, on_gloo,
                              tol=_small(dt))
                full = [c.data(r, (n * 3,), dt, k) for r in range(n)]
                out = torch.zeros(3, dtype=dt)
                w = dist.reduce_scatter_tensor(out, full[me], op=KINDS[k],
                                               group=g, async_op=a)
                _wait(w, a)
                want = ref_reduce(full, k)[me * 3:(me + 1) * 3]
                c.same("%s %s tensor" % (dt, k), out, want,
                       tol=k == "avg" and _small(dt))
                if gl is not None and not a:
                    def on_gloo():
                        u = torch.zeros(3, dtype=dt)
                        dist.reduce_scatter_tensor(u, full[me], op=KINDS[k],
                                                   group=gl)
                        return u
                    c.vs_gloo("%s %s reduce_scatter_tensor" % (dt, k), out,
                              on_gloo, tol=_small(dt))


@check
def all_to_all(c, g=None, ranks=None, gl=None):
    ranks = ranks or list(range(c.world))
    gl = gl if g is not None else c.gloo
    n, me = len(ranks), ranks.index(c.rank)

    def cnt(i, j):                  # rows rank i sends rank j: unequal
        return (i + 2 * j) % 3 + (1 if i == j else 0)
    for dt in DTYPES:
        for a in (False, True):
            ins = [[c.data(i, (cnt(i, j), 2), dt, j) for j in range(n)]
                   for i in range(n)]
            outs = [torch.zeros(cnt(j, me), 2, dtype=dt) for j in range(n)]
            w = dist.all_to_all(outs, ins[me], group=g, async_op=a)
            _wait(w, a)
            for j in range(n):
                c.same("%s list from %d" % (dt, j), outs[j], ins[j][me])
            # single, with split sizes
            x = torch.cat(ins[me])
            out = torch.zeros(sum(cnt(j, me) for j in range(n)), 2, dtype=dt)
            w = dist.all_to_all_single(
                out, x, [cnt(j, me) for j in range(n)],
                [cnt(me, j) for j in range(n)], group=g, async_op=a)
            _wait(w, a)
            c.same("%s single splits" % dt, out,
                   torch.cat([ins[j][me] for j in range(n)]))
            if gl is not None and not a:
                def on_gloo():
                    o = torch.zeros_like(out)
                    dist.all_to_all_single(o, x, [cnt(j, me) for j in range(n)],
                                           [cnt(me, j) for j in range(n)],
                                           group=gl)
                    return o
                c.vs_gloo("%s all_to_all_single uneven" % dt, out, on_gloo)
            # single, equal split
            xs = [c.data(i, (2 * n, 3), dt, "eq") for i in range(n)]
            out = torch.zeros(2 * n, 3, dtype=dt)
            w = dist.all_to_all_single(out, xs[me], group=g, async_op=a)
            _wait(w, a)
            c.same("%s single equal" % dt, out,
                   torch.cat([xs[j][2 * me:2 * me + 2] for j in range(n)]))


@check
def all_to_all_single_vs_gloo(c):
    x = c.data(c.rank, (2 * c.world, 5), torch.float32)
    a, b = torch.zeros_like(x), torch.zeros_like(x)
    dist.all_to_all_single(a, x)
    dist.all_to_all_single(b, x, group=c.gloo)
    c.same("vs gloo", a, b)


@check
def rooted(c, g=None, ranks=None, gl=None):
    ranks = ranks or list(range(c.world))
    gl = gl if g is not None else c.gloo
    n, me = len(ranks), ranks.index(c.rank)
    for dt in DTYPES:
        for root in range(n):
            groot = ranks[root]
            a = dt == torch.float32
            xs = [c.data(r, (4,), dt, root) for r in range(n)]
            t = xs[me].clone()
            _wait(dist.broadcast(t, groot, group=g, async_op=a), a)
            c.same("%s broadcast root %d" % (dt, root), t, xs[root])
            if gl is not None:
                def on_gloo():
                    u = xs[me].clone()
                    dist.broadcast(u, groot, group=gl)
                    return u
                c.vs_gloo("%s broadcast" % dt, t, on_gloo)
            for k in ("sum", "max"):
                t = xs[me].clone()
                _wait(dist.reduce(t, groot, op=KINDS[k], group=g, async_op=a), a)
                c.same("%s reduce %s root %d" % (dt, k, root), t,
                       ref_reduce(xs, k) if me == root else xs[me])
            outs = [torch.zeros(4, dtype=dt) for _ in range(n)] if me == root else None
            _wait(dist.gather(xs[me], outs, groot, group=g, async_op=a), a)
            if me == root:
                for r in range(n):
                    c.same("%s gather[%d]" % (dt, r), outs[r], xs[r])
            pieces = [c.data(root, (3,), dt, ("sc", j)) for j in range(n)]
            out = torch.zeros(3, dtype=dt)
            _wait(dist.scatter(out, pieces if me == root else None, groot,
                               group=g, async_op=a), a)
            c.same("%s scatter root %d" % (dt, root), out, pieces[me])
            if gl is not None:
                def on_gloo():
                    u = torch.zeros(3, dtype=dt)
                    dist.scatter(u, pieces if me == root else None, groot,
                                 group=gl)
                    return u
                c.vs_gloo("%s scatter" % dt, out, on_gloo)


@check
def rooted_vs_gloo(c):
    x = c.data(c.rank, (6,), torch.float32)
    for root in range(c.world):
        a, b = x.clone(), x.clone()
        dist.reduce(a, root)
        dist.reduce(b, root, group=c.gloo)
        if c.rank == root:    # gloo uses the others' tensors as scratch
            c.same("reduce root %d" % root, a, b, tol=True)
        a, b = x.clone(), x.clone()
        dist.broadcast(a, root)
        dist.broadcast(b, root, group=c.gloo)
        c.same("broadcast root %d" % root, a, b)


@check
def barrier_and_sub_groups(c):
    dist.barrier()
    w = dist.barrier(async_op=True)
    c.true("async barrier", w.wait())
    evens = list(range(0, c.world, 2))
    odds = list(range(1, c.world, 2))
    groups = [(r, dist.new_group(r), dist.new_group(r, backend="gloo"))
              for r in (evens, odds, [0, c.world - 1])]
    for ranks, g, gl in groups:
        if c.rank not in ranks:
            c.true("non-member gets NON_GROUP_MEMBER",
                   g == dist.GroupMember.NON_GROUP_MEMBER)
            continue
        c.true("backend of sub-group", dist.get_backend(g) == "spcoll")
        for fn in (all_reduce, all_gather, all_to_all, rooted):
            fn(c, g, ranks, gl)
        x = c.data(c.rank, (2 * len(ranks), 3), torch.float32)
        a, b = torch.zeros_like(x), torch.zeros_like(x)
        dist.all_to_all_single(a, x, group=g)
        dist.all_to_all_single(b, x, group=gl)
        c.same("sub-group vs gloo %s" % ranks, a, b)


@check
def async_does_not_block(c):
    """Rank 0 starts an all_reduce that cannot complete (rank 1 is held in a
    gloo barrier until rank 0 has looked): is_completed() says False and
    returns; then the ranks meet and wait() and the future give the sum."""
    t = torch.full((3,), float(c.rank + 1))
    if c.rank == 0:
        w = dist.all_reduce(t, async_op=True)
        fut = w.get_future()
        seen = []
        fut2 = fut.then(lambda f: seen.append(f.value()[0].clone()) or 1)
        c.true("not completed while rank 1 has not issued it",
               not w.is_completed())
        c.true("future not done yet", not fut.done())
        dist.barrier(group=c.gloo)
        c.true("wait", w.wait())
        fut2.wait()
        c.true("callback ran with the result %s" % seen,
               len(seen) == 1 and torch.equal(seen[0], t))
    else:
        dist.barrier(group=c.gloo)
        w = dist.all_reduce(t, async_op=True)
        w.wait()
    want = float(sum(range(1, c.world + 1)))
    c.same("sum", t, torch.full((3,), want))


@check
def subgroups_and_objects(c):
    """new_subgroups_by_enumeration (DeviceMesh-style grouping) and the
    object collectives trainers use for metadata."""
    lists = [[0, c.world - 1]] + ([list(range(1, c.world - 1))]
                                  if c.world > 2 else [])
    mine = [r for r in lists if c.rank in r][0]
    if int(torch.__version__.split(".")[0]) >= 2:
        cur, subs = dist.new_subgroups_by_enumeration(lists)
    else:   # 1.13's new_subgroups* refuse to run without CUDA
        subs = [dist.new_group(r) for r in lists]
        cur = subs[lists.index(mine)]
    t = torch.tensor([float(c.rank)])
    dist.all_reduce(t, group=cur)
    c.same("sub-group sum", t, torch.tensor([float(sum(mine))]))
    objs = [None] * c.world
    dist.all_gather_object(objs, {"rank": c.rank, "s": "x" * c.rank})
    c.true("all_gather_object", objs == [{"rank": r, "s": "x" * r}
                                         for r in range(c.world)])
    lst = [c.rank, None] if c.rank == 1 else [None, None]
    dist.broadcast_object_list(lst, src=1)
    c.true("broadcast_object_list %s" % lst, lst == [1, None])


@check
def p2p_ring(c):
    nxt, prv = (c.rank + 1) % c.world, (c.rank - 1) % c.world
    for dt in (torch.float32, torch.bfloat16, torch.bool):
        send = c.data(c.rank, (5, 2), dt)
        recv = torch.zeros(5, 2, dtype=dt)
        reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, send, nxt),
                                       dist.P2POp(dist.irecv, recv, prv)])
        for q in reqs:
            q.wait()
        c.same("%s ring batch" % dt, recv, c.data(prv, (5, 2), dt))
    # blocking send/recv, alternating by parity, K/V rotation twice
    kv = c.data(c.rank, (3,), torch.float32)
    for step in range(2):
        got = torch.zeros(3)
        if c.rank % 2 == 0:
            dist.send(kv, nxt)
            dist.recv(got, prv)
        else:
            dist.recv(got, prv)
            dist.send(kv, nxt)
        kv = got
        c.same("rotation %d" % step, kv,
               c.data((c.rank - step - 1) % c.world, (3,), torch.float32))


@check
def p2p_tags_and_any_source(c):
    """Tags are separate channels (each rank posts tag 1 then tag 2 to the
    next rank and receives tag 2 first from the previous), and a receive
    with no src takes any sender and says which."""
    nxt, prv = (c.rank + 1) % c.world, (c.rank - 1) % c.world
    ws = [dist.isend(c.data(c.rank, (4,), torch.float32), nxt, tag=1),
          dist.isend(c.data(c.rank, (6,), torch.int64), nxt, tag=2)]
    b, a = torch.zeros(6, dtype=torch.int64), torch.zeros(4)
    dist.recv(b, prv, tag=2)
    dist.recv(a, prv, tag=1)
    for w in ws:
        w.wait()
    c.same("tag 2 received first", b, c.data(prv, (6,), torch.int64))
    c.same("then tag 1", a, c.data(prv, (4,), torch.float32))
    if c.rank == 0:
        seen = []
        for _ in range(c.world - 1):
            t = torch.zeros(3)
            src = dist.recv(t)
            c.same("any source: from %d" % src, t,
                   c.data(src, (3,), torch.float32, salt=7))
            seen.append(src)
        c.true("every sender once %s" % seen,
               sorted(seen) == list(range(1, c.world)))
    else:
        dist.send(c.data(c.rank, (3,), torch.float32, salt=7), 0)
    dist.barrier()


@check
def p2p_mismatch_fails_both(c):
    """A send and its receive that disagree on the element count both raise
    with the daemon's words (across nodes too: the receiver's daemon
    checks, the sender hears the same text); the next pair works."""
    nxt, prv = (c.rank + 1) % c.world, (c.rank - 1) % c.world
    w = dist.isend(c.data(c.rank, (4,), torch.float32), nxt, tag=5)
    got = torch.zeros(5)
    for what, f in (("receive", lambda: dist.recv(got, prv, tag=5)),
                    ("send", w.wait)):
        try:
            f()
            c.true("mismatched %s raised" % what, False)
        except RuntimeError as e:
            c.true("the %s names the counts (%s)" % (what, e),
                   "4 elements sent, 5 expected by the receive" in str(e))
    ok = torch.zeros(4)
    w = dist.isend(c.data(c.rank, (4,), torch.float32, salt=1), nxt, tag=6)
    dist.recv(ok, prv, tag=6)
    w.wait()
    c.same("the pair after it", ok,
           c.data(prv, (4,), torch.float32, salt=1))


@check
def mismatch_fails_everywhere(c):
    n = 4 + (c.rank == 0)
    for a in (False, True):
        try:
            w = dist.all_reduce(torch.ones(n), async_op=a)
            if a:
                w.wait()
            c.true("mismatched all_reduce raised", False)
        except RuntimeError as e:
            c.true("the daemon's message (%s)" % e, "spcoll" in str(e))
    # a bad argument found in Python on one rank only: every rank raises
    outs = [torch.zeros(2) for _ in range(c.world + (c.rank == 0))]
    try:
        dist.all_gather(outs, torch.ones(2))
        c.true("one rank's bad output list raised", False)
    except (RuntimeError, ValueError) as e:
        c.true("error names the bad list (%s)" % e,
               "list of %d output" % c.world in str(e) or
               "rank 0" in str(e))
    t = torch.ones(2)
    dist.all_reduce(t)
    c.same("the group works after a mismatch", t,
           torch.full((2,), float(c.world)))


@check
def train_ulysses_three_steps(c):
    import backend_train
    sp = backend_train.train(dist.group.WORLD, c.rank, c.world)
    gl = backend_train.train(c.gloo, c.rank, c.world)
    c.true("losses spcoll %s vs gloo %s" % (sp, gl),
           len(sp) == 3 and all(abs(a - b) <= 1e-5 * max(1.0, abs(b))
                                for a, b in zip(sp, gl)))
    c.true("the loss went down %s" % sp, sp[2] < sp[0])


def run(rank, world, socket, store, tag, only=None):
    """socket: the daemon's, or a list (rank r uses socket[r]: ranks on
    several nodes). only: the names of the checks to run (None: all)."""
    if isinstance(socket, (list, tuple)):
        socket = socket[rank]
    os.environ["SPCOLL_SOCKET"] = socket
    torch.set_num_threads(1)
    dist.init_process_group("spcoll", init_method="file://" + store,
                            rank=rank, world_size=world)
    gloo = dist.new_group(backend="gloo")
    results = {}
    for fn in CHECKS:
        if only is not None and fn.__name__ not in only:
            continue
        c = Ctx(rank, world, gloo)
        c.name = fn.__name__
        try:
            fn(c)
            if c.compared == 0:
                c.failures.append("compared nothing")
        except Exception:
            c.failures.append("raised:\n" + traceback.format_exc())
        results[fn.__name__] = c.failures
        results["gloo:" + fn.__name__] = (c.gloo_compared, c.gloo_lacks)
    dist.destroy_process_group()
    return results
