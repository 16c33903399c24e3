"""Megatron's tensor_parallel.mappings over spcoll against gloo."""
import torch

from spcoll import mappings as M
import gloo_ref as ref
from checks_seq import fwd_bwd
from registry import check


def _run(ctx, label, fn, x, want_y, want_g, salt):
    y, gx = fwd_bwd(fn, x, lambda s: ctx.mine(s, salt=salt))
    ctx.same(label + " forward", y, want_y)
    ctx.same(label + " grad", gx, want_g(ctx.mine(list(y.shape), salt=salt)))


@check()
def megatron_model_parallel_region(ctx):
    w, r, g = ctx.world, ctx.rank, ctx.group
    x = ctx.mine([3, 2, 4 * w])
    _run(ctx, "copy_to", lambda t: M.copy_to_tensor_model_parallel_region(t, g),
         x, x, lambda G: ref.all_reduce(G), 1)
    _run(ctx, "reduce_from", lambda t: M.reduce_from_tensor_model_parallel_region(t, g),
         x, ref.all_reduce(x), lambda G: G, 2)
    xs = ctx.data([3, 2, 4 * w + 1])            # same everywhere; unaligned last dim
    sz = ref.rule(4 * w + 1, w)
    _run(ctx, "scatter_to_tp", lambda t: M.scatter_to_tensor_model_parallel_region(t, g),
         xs, xs.narrow(-1, ref.offsets(sz)[r], sz[r]), lambda G: ref.all_gather(G, -1, sz), 3)
    _run(ctx, "gather_from_tp", lambda t: M.gather_from_tensor_model_parallel_region(t, g),
         x, ref.all_gather(x, -1), lambda G: G.narrow(-1, r * x.shape[-1], x.shape[-1]), 4)
    _run(ctx, "all_gather_last_dim",
         lambda t: M.all_gather_last_dim_from_tensor_parallel_region(t, g),
         x, ref.all_gather(x, -1), lambda G: ref.reduce_scatter(G, -1), 5)
    _run(ctx, "reduce_scatter_last_dim",
         lambda t: M.reduce_scatter_last_dim_to_tensor_parallel_region(t, g),
         x, ref.reduce_scatter(x, -1), lambda G: ref.all_gather(G, -1), 6)
    # the functional pieces
    ctx.same("_reduce", M._reduce(x, g), ref.all_reduce(x))
    ctx.true("_reduce leaves its input alone", torch.equal(x, ctx.mine([3, 2, 4 * w])))
    ctx.same("_gather_along_last_dim", M._gather_along_last_dim(x, g), ref.all_gather(x, -1))
    ctx.same("_reduce_scatter_along_last_dim", M._reduce_scatter_along_last_dim(x, g),
             ref.reduce_scatter(x, -1))
    ctx.same("_split_along_last_dim", M._split_along_last_dim(xs, g),
             xs.narrow(-1, ref.offsets(sz)[r], sz[r]))


@check()
def megatron_sequence_parallel_region(ctx):
    w, r, g = ctx.world, ctx.rank, ctx.group
    xs = ctx.data([2 * w + 1, 2, 3])
    sz = ref.rule(2 * w + 1, w)
    _run(ctx, "scatter_to_sp", lambda t: M.scatter_to_sequence_parallel_region(t, g),
         xs, xs.narrow(0, ref.offsets(sz)[r], sz[r]), lambda G: ref.all_gather(G, 0, sz), 1)
    x = ctx.mine([2, 2, 3])
    _run(ctx, "gather_from_sp (tp output grad: reduce-scatter)",
         lambda t: M.gather_from_sequence_parallel_region(t, True, g),
         x, ref.all_gather(x, 0), lambda G: ref.reduce_scatter(G, 0), 2)
    _run(ctx, "gather_from_sp (own split)",
         lambda t: M.gather_from_sequence_parallel_region(t, False, g),
         x, ref.all_gather(x, 0), lambda G: G.narrow(0, 2 * r, 2), 3)
    osz = [1 + j for j in range(w)]
    xu = ctx.mine([osz[r], 3], salt=4)
    for tpog in (True, False):
        _run(ctx, "gather_from_sp uneven tpog=%s" % tpog,
             lambda t: M.gather_from_sequence_parallel_region(t, tpog, g, osz),
             xu, ref.all_gather(xu, 0, osz),
             (lambda G: ref.reduce_scatter(G, 0, osz)) if tpog else
             (lambda G: G.narrow(0, ref.offsets(osz)[r], osz[r])), 5 + tpog)
    xr = ctx.mine([sum(osz), 3], salt=7)
    _run(ctx, "reduce_scatter_to_sp uneven",
         lambda t: M.reduce_scatter_to_sequence_parallel_region(t, g, osz),
         xr, ref.reduce_scatter(xr, 0, osz), lambda G: ref.all_gather(G, 0, osz), 8)
    xe = ctx.mine([3 * w, 2], salt=9)
    _run(ctx, "reduce_scatter_to_sp", lambda t: M.reduce_scatter_to_sequence_parallel_region(t, g),
         xe, ref.reduce_scatter(xe, 0), lambda G: ref.all_gather(G, 0), 10)
    ctx.same("_gather_along_first_dim sizes", M._gather_along_first_dim(xu, g, osz),
             ref.all_gather(xu, 0, osz))
    ctx.same("_reduce_scatter_along_first_dim sizes",
             M._reduce_scatter_along_first_dim(xr, g, osz), ref.reduce_scatter(xr, 0, osz))
    ctx.same("_split_along_first_dim", M._split_along_first_dim(xs, g),
             xs.narrow(0, ref.offsets(sz)[r], sz[r]))


@check()
def megatron_all_to_all(ctx):
    w, r, g = ctx.world, ctx.rank, ctx.group
    # rank i sends (i + j) % 3 + 1 rows to rank j
    send = lambda i, j: (i + j) % 3 + 1
    ins = [send(r, j) for j in range(w)]
    outs = [send(i, r) for i in range(w)]
    x = ctx.mine([sum(ins), 4])
    _run(ctx, "all_to_all uneven", lambda t: M.all_to_all(g, t, outs, ins), x,
         ref.all_to_all_rows(x, ins, outs), lambda G: ref.all_to_all_rows(G, outs, ins), 1)
    xe = ctx.mine([2 * w, 3], salt=2)
    even = [2] * w
    _run(ctx, "all_to_all even (no lists)", lambda t: M.all_to_all(g, t), xe,
         ref.all_to_all_rows(xe, even, even), lambda G: ref.all_to_all_rows(G, even, even), 3)
    # sp2hp: [n, H] -> [w n, H/w]; a 3-D input is seen as [n, H]
    H = 2 * w
    xs = ctx.mine([3, 2, H], salt=4)
    x2 = xs.reshape(-1, H)
    _run(ctx, "all_to_all_sp2hp", lambda t: M.all_to_all_sp2hp(t, g), xs,
         ref.all_to_all(x2, 1, 0),
         lambda G: ref.all_to_all(G, 0, 1, H).reshape(3, 2, H), 5)
    xh = ctx.mine([2 * w, 3], salt=6)
    _run(ctx, "all_to_all_hp2sp", lambda t: M.all_to_all_hp2sp(t, g), xh,
         ref.all_to_all(xh, 0, 1), lambda G: ref.all_to_all(G, 1, 0, 2 * w), 7)
