"""The seeds' sequence-parallel autograd functions (MindSpeed names): split
and gather pairs with grad_scale, Ulysses all_to_all, zigzag, packed
varlen, hybrid CP, and LightRFT's gather with unpad. Forward output and
input gradient against gloo + plain torch."""
import torch

import spcoll
import gloo_ref as ref
from registry import check


def fwd_bwd(fn, x, grad_fn):
    """y = fn(x) and dL/dx for upstream gradient grad_fn(y.shape)."""
    x = x.clone().requires_grad_(True)
    y = fn(x)
    y.backward(grad_fn(y.shape))
    return y.detach(), x.grad


def everyone(t, dim=0):
    """Every rank's t (sizes may differ along dim) through gloo."""
    sizes = [s[dim] for s in ref.all_gather_object(list(t.shape))]
    return list(torch.split(ref.all_gather(t, dim, sizes), sizes, dim))


@check()
def split_forward_gather_backward(ctx):
    w, r, g = ctx.world, ctx.rank, ctx.group
    cases = [([7, 5, 4], 0, None, "down"),
             ([3, 10, 4], 1, ref.rule(10, w), "up"),
             ([2, 3, 11], -1, list(reversed(ref.rule(11, w))), None),
             ([13], 0, None, "down"),            # unaligned, no sizes
             ([2, 2, 6, 3, 2], 2, None, "down")]
    for i, (shape, dim, sizes, scale) in enumerate(cases):
        x = ctx.data(shape, salt=i)
        sz = sizes or ref.rule(shape[dim], w)
        G = lambda s: ctx.mine(s, salt=100 + i)
        y, gx = fwd_bwd(lambda t: spcoll.split_forward_gather_backward(
            t, g, dim, sizes, scale), x, G)
        want_y = x.narrow(dim, ref.offsets(sz)[r], sz[r])
        want_g = ref.all_gather(ref.scaled(G(want_y.shape), scale, w), dim, sz)
        ctx.same("case %d forward" % i, y, want_y)
        ctx.same("case %d input grad" % i, gx, want_g)
    # bf16 keeps its dtype through both directions
    x = ctx.data([4, 6], torch.bfloat16)
    y, gx = fwd_bwd(lambda t: spcoll.split_forward_gather_backward(t, g, 1, None, "up"),
                    x, lambda s: ctx.mine(s, torch.bfloat16, salt=9))
    sz = ref.rule(6, w)
    ctx.same("bf16 forward", y, x.narrow(1, ref.offsets(sz)[r], sz[r]))
    ctx.same("bf16 grad", gx, ref.all_gather(
        ref.scaled(ctx.mine(list(y.shape), torch.bfloat16, salt=9), "up", w), 1, sz))


@check()
def gather_forward_split_backward(ctx):
    w, r, g = ctx.world, ctx.rank, ctx.group
    cases = [([3, 4], 0, None, "up"),
             ([2, None, 3], 1, [1 + j for j in range(w)], "down"),
             ([2, 3, None], -1, [3 - j % 2 for j in range(w)], None),
             ([None, 2], 0, [0] + [2] * (w - 1), "up")]     # an empty rank
    for i, (shape, dim, sizes, scale) in enumerate(cases):
        shape = list(shape)
        d = dim % len(shape)
        if sizes is not None:
            shape[d] = sizes[r]
        x = ctx.mine(shape, salt=i)
        sz = sizes or [shape[d]] * w
        G = lambda s: ctx.mine(s, salt=100 + i)
        y, gx = fwd_bwd(lambda t: spcoll.gather_forward_split_backward(
            t, g, dim, sizes, scale), x, G)
        ctx.same("case %d forward" % i, y, ref.all_gather(x, dim, sz))
        ctx.same("case %d input grad" % i, gx,
                 ref.scaled(G(y.shape), scale, w).narrow(d, ref.offsets(sz)[r], sz[r]))


@check()
def ulysses_all_to_all(ctx):
    """Aligned and unaligned scatter/gather sizes, 3-D to 5-D (MindSpeed's
    aligned 5-D path is the known defect), backward the reverse."""
    w, r, g = ctx.world, ctx.rank, ctx.group
    # (shape with G along gather dim, scatter_dim, gather_dim, pass G)
    cases = [([2, 3, 4 * w, 5], 2, 1, False),          # [b, s/P, h, d] -> [b, s, h/P, d]
             ([2, 4 * w + 1, 3], 1, 0, False),         # unaligned scatter
             ([2, 7, 2 * w + 1, 3], 1, 2, True),       # unaligned gather (G passed)
             ([2, 2 * w - 1, 3, 2 * w + 3, 2], 1, 3, True),   # 5-D, both unaligned
             ([3, 2 * w, 2, 2, 2], 1, 0, False),       # 5-D aligned
             ([5, 2 * w + 1], 0, 1, True)]             # 2-D, gather dim 1
    for i, (full, sd, gd, pass_g) in enumerate(cases):
        shape = list(full)
        Gsize = full[gd] * (w if not pass_g else 1)
        shape[gd] = ref.rule(Gsize, w)[r] if pass_g else full[gd]
        x = ctx.mine(shape, salt=i)
        gs = Gsize if pass_g else None
        G = lambda s: ctx.mine(s, salt=100 + i)
        y, gx = fwd_bwd(lambda t: spcoll.all_to_all(t, g, sd, gd, gs), x, G)
        want = ref.all_to_all(x, sd, gd, gs)
        ctx.same("case %d forward" % i, y, want)
        ctx.same("case %d input grad" % i, gx,
                 ref.all_to_all(G(want.shape), gd, sd, shape[sd]))


def zigzag_chunks(t, dim, w):
    return list(torch.chunk(t, 2 * w, dim))


@check()
def zigzag_split_and_gather(ctx):
    w, r, g = ctx.world, ctx.rank, ctx.group
    for dim, shape in ((0, [4 * w, 3]), (1, [2, 2 * w * 3, 2])):
        x = ctx.data(shape)
        G = lambda s: ctx.mine(s, salt=1)
        y, gx = fwd_bwd(lambda t: spcoll.load_balanced_split_forward_gather_backward(
            t, g, dim), x, G)
        ch = zigzag_chunks(x, dim, w)
        ctx.same("split dim %d forward" % dim, y, torch.cat([ch[r], ch[2 * w - 1 - r]], dim))
        # backward: every rank's two chunks back in place, divided by w
        parts = [list(torch.chunk(p, 2, dim)) for p in everyone(G(y.shape), dim)]
        full = [None] * (2 * w)
        for j, (a, b) in enumerate(parts):
            full[j], full[2 * w - 1 - j] = a, b
        ctx.same("split dim %d grad" % dim, gx, ref.scaled(torch.cat(full, dim), "down", w))

        local = list(shape)
        local[dim] = shape[dim] // w
        xl = ctx.mine(local, salt=2)
        y, gx = fwd_bwd(lambda t: spcoll.load_balanced_gather_forward_split_backward(
            t, g, dim), xl, lambda s: ctx.mine(s, salt=3))
        parts = [list(torch.chunk(p, 2, dim)) for p in everyone(xl, dim)]
        full = [None] * (2 * w)
        for j, (a, b) in enumerate(parts):
            full[j], full[2 * w - 1 - j] = a, b
        ctx.same("gather dim %d forward" % dim, y, torch.cat(full, dim))
        ch = zigzag_chunks(ref.scaled(ctx.mine(list(y.shape), salt=3), "up", w), dim, w)
        ctx.same("gather dim %d grad" % dim, gx, torch.cat([ch[r], ch[2 * w - 1 - r]], dim))


def packed_pieces(x, dim, seq_lens, w):
    """pieces[s][j]: rank j's share (rule) of sequence s of packed x."""
    out, pos = [], 0
    for n in seq_lens:
        sz = ref.rule(n, w)
        out.append([x.narrow(dim, pos + o, s) for o, s in zip(ref.offsets(sz), sz)])
        pos += n
    return out


def repack(rank_parts, table, dim):
    """Rank j's concatenated pieces (rank_parts[j], table[j] per sequence)
    back in the packed order."""
    split = [list(torch.split(p, row, dim)) for p, row in zip(rank_parts, table)]
    return torch.cat([split[j][s] for s in range(len(table[0]))
                      for j in range(len(table))], dim)


@check()
def packed_split_and_gather(ctx):
    w, r, g = ctx.world, ctx.rank, ctx.group
    lens = [5, 1, 7, 3 * w]
    total = sum(lens) + 2                       # a tail no sequence covers
    x = ctx.data([total, 3])
    G = lambda s: ctx.mine(s, salt=1)
    y, gx = fwd_bwd(lambda t: spcoll.packed_data_split_forward_gather_backward(
        t, g, lens, 0), x, G)
    pieces = packed_pieces(x, 0, lens, w)
    ctx.same("split forward", y, torch.cat([p[r] for p in pieces]))
    table = spcoll.cal_split_sizes_multi(lens, w).tolist()
    want = torch.zeros(total, 3)
    want[:sum(lens)] = ref.scaled(repack(everyone(G(y.shape)), table, 0), "down", w)
    ctx.same("split grad (zero past the sequences)", gx, want)

    for name, tab in (("rule table", table),
                      ("other table", [list(reversed(row)) for row in reversed(table)])):
        seq = [sum(col) for col in zip(*tab)]
        xl = ctx.mine([sum(tab[r]), 2], salt=2)
        y, gx = fwd_bwd(lambda t: spcoll.packed_data_gather_forward_split_backward(
            t, torch.tensor(tab), g, 0), xl, lambda s: ctx.mine(s, salt=3))
        ctx.same("gather forward, %s" % name, y, repack(everyone(xl), tab, 0))
        gy = ref.scaled(ctx.mine(list(y.shape), salt=3), "up", w)
        mine, pos = [], 0
        for s, n in enumerate(seq):
            col = [tab[j][s] for j in range(w)]
            mine.append(gy[pos + sum(col[:r]):pos + sum(col[:r + 1])])
            pos += n
        ctx.same("gather grad, %s" % name, gx, torch.cat(mine))


@check(4)
def hybrid_cp_ring_then_ulysses(ctx):
    """Ring groups {0,1},{2,3} (zigzag), Ulysses groups {0,2},{1,3}."""
    g, r = ctx.group, ctx.rank
    R, U = 2, 2
    ps = spcoll.initialize_context_parallel(g, ring_size=R)
    rr, ur = r % R, r // R
    ctx.true("ring/ulysses ranks", (ps.get_ring_rank(), ps.get_ulysses_rank()) == (rr, ur),
             str((ps.get_ring_rank(), ps.get_ulysses_rank())))
    L = 2 * R * U * 3
    x = ctx.data([2, L, 3])
    y, gx = fwd_bwd(lambda t: spcoll.split_forward_gather_backward_with_cp(t, 1),
                    x, lambda s: ctx.mine(s, salt=1))
    ch = list(torch.chunk(x, 2 * R, 1))
    zz = torch.cat([ch[rr], ch[2 * R - 1 - rr]], 1)
    ctx.same("split_with_cp forward", y, torch.chunk(zz, U, 1)[ur])
    allg = everyone(ctx.mine(list(y.shape), salt=1), 1)     # global ranks
    full = [None] * (2 * R)
    for ring in range(R):
        loc = torch.cat([allg[u * R + ring] for u in range(U)], 1)
        loc = ref.scaled(ref.scaled(loc, "down", U), "down", R)
        full[ring], full[2 * R - 1 - ring] = torch.chunk(loc, 2, 1)
    ctx.same("split_with_cp grad", gx, torch.cat(full, 1))

    xl = ctx.mine([2, L // (R * U), 3], salt=2)
    y, gx = fwd_bwd(lambda t: spcoll.gather_forward_split_backward_with_cp(t, 1, L),
                    xl, lambda s: ctx.mine(s, salt=3))
    allx = everyone(xl, 1)
    full = [None] * (2 * R)
    for ring in range(R):
        loc = torch.cat([allx[u * R + ring] for u in range(U)], 1)
        full[ring], full[2 * R - 1 - ring] = torch.chunk(loc, 2, 1)
    ctx.same("gather_with_cp forward", y, torch.cat(full, 1))
    gy = ref.scaled(ref.scaled(ctx.mine(list(y.shape), salt=3), "up", R), "up", U)
    ch = list(torch.chunk(gy, 2 * R, 1))
    ctx.same("gather_with_cp grad", gx,
             torch.chunk(torch.cat([ch[rr], ch[2 * R - 1 - rr]], 1), U, 1)[ur])

    lens = [6, 3, 9]
    xp = ctx.data([sum(lens), 2], salt=4)
    y, gx = fwd_bwd(lambda t: spcoll.packed_data_split_forward_gather_backward_with_cp(
        t, 0, lens), xp, lambda s: ctx.mine(s, salt=5))
    ring_loc = torch.cat([p[rr] for p in packed_pieces(xp, 0, lens, R)])
    usz = ref.rule(ring_loc.shape[0], U)
    ctx.same("packed split_with_cp forward", y,
             ring_loc.narrow(0, ref.offsets(usz)[ur], usz[ur]))
    allg = everyone(ctx.mine(list(y.shape), salt=5))
    table = spcoll.cal_split_sizes_multi(lens, R).tolist()
    rings = [ref.scaled(ref.scaled(torch.cat([allg[u * R + ring] for u in range(U)]),
                                   "down", U), "down", R) for ring in range(R)]
    ctx.same("packed split_with_cp grad", gx, repack(rings, table, 0))

    mine_n = ref.rule(sum(table[rr]), U)[ur]
    xl = ctx.mine([mine_n, 2], salt=6)
    y, gx = fwd_bwd(lambda t: spcoll.packed_data_gather_forward_split_backward_with_cp(
        t, 0, lens), xl, lambda s: ctx.mine(s, salt=7))
    allx = everyone(xl)
    rings = [torch.cat([allx[u * R + ring] for u in range(U)]) for ring in range(R)]
    ctx.same("packed gather_with_cp forward", y, repack(rings, table, 0))
    gy = ref.scaled(ctx.mine(list(y.shape), salt=7), "up", R)
    ring_part = torch.cat([p[rr] for p in packed_pieces(gy, 0, lens, R)])
    usz = ref.rule(ring_part.shape[0], U)
    ctx.same("packed gather_with_cp grad", gx,
             ref.scaled(ring_part, "up", U).narrow(0, ref.offsets(usz)[ur], usz[ur]))
    spcoll.set_parallel_state()


@check()
def gather_and_unpad(ctx):
    """LightRFT: gather, drop padding along unpad_dim; backward unscaled."""
    w, r, g = ctx.world, ctx.rank, ctx.group
    for i, (shape, dim, pad, udim) in enumerate((([3, 3, 2], 1, 2, None),
                                                 ([3, 3, 2], 1, 1, 2),
                                                 ([2, 4], 0, 1, None),
                                                 ([2, 2, 3], 2, 0, None))):
        x = ctx.mine(shape, salt=i)
        y, gx = fwd_bwd(lambda t: spcoll.gather_forward_split_backward_and_unpad(
            t, g, dim, pad, udim), x, lambda s: ctx.mine(s, salt=10 + i))
        full = ref.all_gather(x, dim)
        ud = dim if udim is None else udim
        ctx.same("case %d forward" % i, y, full.narrow(ud, 0, full.shape[ud] - pad))
        gpad = torch.zeros(full.shape)
        gpad.narrow(ud, 0, full.shape[ud] - pad).copy_(ctx.mine(list(y.shape), salt=10 + i))
        ctx.same("case %d grad" % i, gx, gpad.narrow(dim, r * shape[dim], shape[dim]))
