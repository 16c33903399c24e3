"""Core: dtypes, reductions, zero copy and staging, errors, group split."""
import torch
import torch.distributed as dist

import spcoll
from spcoll import ops
import gloo_ref as ref
from registry import check

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16,
          torch.int8, torch.uint8, torch.int32, torch.int64, torch.bool]


@check()
def all_gather_every_dtype(ctx):
    """Unequal sizes along dim 0, every dtype."""
    w, r, g = ctx.world, ctx.rank, ctx.group
    sizes = [2 + j % 3 for j in range(w)]
    for dt in DTYPES:
        x = ctx.mine([sizes[r], 3], dt)
        y = ops.all_gather(x, g, 0, sizes)
        want = ref.all_gather(x, 0, sizes)
        ctx.same("all_gather %s" % dt, y, want)


@check()
def all_reduce_sum_max_min(ctx):
    g = ctx.group
    for dt in (torch.float32, torch.float64, torch.int32, torch.int64):
        x = ctx.mine([5, 3], dt)
        for op, dop in (("sum", dist.ReduceOp.SUM), ("max", dist.ReduceOp.MAX),
                        ("min", dist.ReduceOp.MIN)):
            ctx.same("all_reduce %s %s" % (op, dt), ops.all_reduce(x, g, op),
                     ref.all_reduce(x, dop))
    # 16-bit floats accumulate in fp32: the reference sums every rank's
    # (regenerated) data in fp32 and rounds once
    for dt in (torch.float16, torch.bfloat16):
        x = ctx.mine([7], dt)
        want = sum(ctx.data([7], dt, j).float() for j in range(ctx.world)).to(dt)
        ctx.same("all_reduce sum %s" % dt, ops.all_reduce(x, g), want)
    s = ctx.mine([], torch.float32)          # 0-d
    ctx.same("all_reduce 0-d", ops.all_reduce(s, g), ref.all_reduce(s))


@check()
def reduce_scatter_dims_and_sizes(ctx):
    g, w = ctx.group, ctx.world
    for shape, dim, sizes in (([9, 4], 0, None), ([3, 10], -1, None),
                              ([2, 7, 3], 1, [1] * (w - 1) + [7 - (w - 1)])):
        x = ctx.mine(shape)
        ctx.same("reduce_scatter %s dim %d sizes %s" % (shape, dim, sizes),
                 ops.reduce_scatter(x, g, dim, sizes),
                 ref.reduce_scatter(x, dim, sizes))


@check()
def zero_copy_and_staging(ctx):
    """Tensors from client.empty and op outputs go in without a copy;
    others (and non-contiguous ones) are staged once, results the same."""
    c, g = ctx.client, ctx.group
    x = c.empty([4, 6])
    x.copy_(ctx.mine([4, 6]))
    n0 = c.staging_stats()[0]
    y = ops.all_gather(x, g, 0)
    z = ops.split(y[4:], g, 1)                  # a view into spcoll memory
    ctx.true("shared input not staged", c.staging_stats()[0] == n0,
             "(staged %d times)" % (c.staging_stats()[0] - n0))
    ctx.true("output is in spcoll memory", c.is_shared(y) and c.is_shared(z))
    ctx.same("all_gather of a shared tensor", y, ref.all_gather(x, 0))
    ctx.same("split of an output's view", z,
             torch.tensor_split(y[4:], [6 // ctx.world * i + min(i, 6 % ctx.world)
                                        for i in range(1, ctx.world)], 1)[ctx.rank])
    plain = ctx.mine([6, 4], salt=1)
    t = plain.t()                               # not contiguous
    n1, b1 = c.staging_stats()
    y2 = ops.all_gather(t, g, 0)
    n2, b2 = c.staging_stats()
    ctx.true("non-contiguous input staged once", (n2 - n1, b2 - b1) == (1, t.numel() * 4),
             "(%d copies, %d bytes)" % (n2 - n1, b2 - b1))
    ctx.same("all_gather of a transposed tensor", y2, ref.all_gather(t.contiguous(), 0))
    ctx.true("shared() of a plain tensor copies into spcoll memory",
             c.is_shared(c.shared(plain)) and not c.is_shared(plain))


@check()
def errors_reach_every_rank(ctx):
    """A bad argument on one rank fails the op on every rank (ValueError
    there, naming the argument); ranks that disagree get SPC_EMISMATCH;
    the group works afterwards."""
    g, r = ctx.group, ctx.rank
    x = ctx.mine([6, 4])
    # only rank 0 asks for dim 5 of a 2-d tensor
    try:
        ops.split(x, g, 5 if r == 0 else 0)
        ctx.true("bad dim on rank 0 fails", False, "no error on rank %d" % r)
    except spcoll.SpcollError as e:
        # rank 0 raises its own message; the others learn from the daemon
        # that the op failed (a bad argument or a disagreement)
        if r == 0:
            ctx.true("bad dim is SPC_EINVAL", e.status_name == "SPC_EINVAL", str(e))
            ctx.true("and a ValueError", isinstance(e, ValueError), repr(e))
            ctx.true("message names the dim", "dim 5" in str(e), str(e))
        else:
            ctx.true("the others fail too", e.status_name in ("SPC_EINVAL", "SPC_EMISMATCH"), str(e))
    # ranks disagree on the dtype
    xd = x.double() if r == 1 else x
    try:
        ops.all_gather(xd, g, 0)
        ctx.true("dtype mismatch fails", False, "no error on rank %d" % r)
    except spcoll.SpcollError as e:
        ctx.true("dtype mismatch is SPC_EMISMATCH", e.status_name == "SPC_EMISMATCH", str(e))
    # zigzag length not divisible by 2w
    try:
        ops.zigzag_split(ctx.data([2 * ctx.world + 1, 2]), g, 0)
        ctx.true("zigzag odd length fails", False, "")
    except ValueError as e:
        ctx.true("zigzag error is an spcoll error", isinstance(e, spcoll.SpcollError), repr(e))
    try:
        ops.all_reduce(torch.zeros(3, dtype=torch.bool), g)
        ctx.true("bool all_reduce refused", False, "")
    except TypeError:
        pass
    try:
        ops.split(x, g, 0, sizes=[1])
        ctx.true("short sizes list refused", ctx.world == 1, "")
    except ValueError as e:
        ctx.true("short sizes named", "split sizes" in str(e), str(e))
    try:
        ops.all_gather(torch.empty(2, device="meta"), g, 0)
        ctx.true("meta tensor refused", False, "")
    except ValueError as e:
        ctx.true("device named", "meta" in str(e), str(e))
    # still usable
    ctx.same("group usable after errors", ops.all_gather(x, g, 0), ref.all_gather(x, 0))


@check(4)
def group_split_color_key(ctx):
    """split(color, key): colors r % 2 with key -r (reverse order); the
    sub-groups' ranks, sizes and ops match gloo sub-groups."""
    g, r = ctx.group, ctx.rank
    sub = g.split(r % 2, -r)
    members = sorted([j for j in range(ctx.world) if j % 2 == r % 2], key=lambda j: -j)
    ctx.true("sub size", sub.size == len(members), "%d" % sub.size)
    ctx.true("sub rank by key", sub.rank == members.index(r),
             "rank %d got %d, want %d" % (r, sub.rank, members.index(r)))
    pgs = [dist.new_group(sorted([j for j in range(ctx.world) if j % 2 == c]))
           for c in (0, 1)]
    x = ctx.mine([2, 3])
    got = ops.all_gather(x, sub, 0)
    parts = ref.all_gather(x, 0, group=pgs[r % 2])      # ascending global rank
    asc = sorted(members)
    want = torch.cat([parts[2 * asc.index(j):2 * asc.index(j) + 2] for j in members])
    ctx.same("all_gather in the sub-group (key order)", got, want)
    none = g.split(-1 if r == 0 else 7)
    ctx.true("color < 0 gives None", (none is None) == (r == 0), repr(none))
    if none is not None:
        ctx.true("others form one group", none.size == ctx.world - 1, repr(none))
        none.leave()
    sub.leave()


@check()
def all_gather_object_and_barrier(ctx):
    obj = {"rank": ctx.rank, "s": "x" * (ctx.rank * 50 + 1), "t": (1, 2.5)}
    got = spcoll.all_gather_object(obj, ctx.group)
    ctx.true("all_gather_object", got == ref.all_gather_object(obj), repr(got)[:200])
    spcoll.barrier(ctx.group)
