"""The reference: each computation written in plain torch.distributed (gloo:
all_gather, all_to_all_single, all_reduce) and local torch indexing,
independently of spcoll's code. Every function is collective over the
default gloo group (all ranks call it)."""
import torch
import torch.distributed as dist


def rule(n, w):
    return [n // w + (1 if i < n % w else 0) for i in range(w)]


def offsets(sizes):
    out, acc = [], 0
    for s in sizes:
        out.append(acc)
        acc += s
    return out


def scaled(g, scale, w):
    """The seeds' grad_scale; 'down' is a true elementwise division."""
    if scale == "up":
        return g * w
    if scale == "down":
        return g / torch.full_like(g, float(w))
    return g.clone()


_AS_BITS = {torch.bfloat16: torch.float16, torch.bool: torch.uint8}


def all_gather(x, dim, sizes=None, group=None):
    """Concatenation along dim of every rank's x; sizes: every rank's size
    along dim (gloo needs equal shapes: pad to the largest, then cut)."""
    if x.dtype in _AS_BITS:
        # gloo moves no bfloat16 or bool: move their bits
        return all_gather(x.view(_AS_BITS[x.dtype]), dim, sizes, group).view(x.dtype)
    w = dist.get_world_size(group)
    dim = dim % x.dim()
    if sizes is None:
        sizes = [x.shape[dim]] * w
    m = max(sizes)
    shape = list(x.shape)
    shape[dim] = m
    padded = torch.zeros(shape, dtype=x.dtype)
    padded.narrow(dim, 0, x.shape[dim]).copy_(x)
    bufs = [torch.zeros_like(padded) for _ in range(w)]
    dist.all_gather(bufs, padded, group=group)
    return torch.cat([b.narrow(dim, 0, s) for b, s in zip(bufs, sizes)], dim)


def all_to_all(x, scatter_dim, gather_dim, gather_size=None, group=None):
    """x cut by the rule along scatter_dim, piece j to rank j; what arrives
    concatenated along gather_dim (rank j sent piece j of G there)."""
    w, r = dist.get_world_size(group), dist.get_rank(group)
    sd, gd = scatter_dim % x.dim(), gather_dim % x.dim()
    S = x.shape[sd]
    G = gather_size if gather_size else x.shape[gd] * w
    spieces = rule(S, w)
    gpieces = rule(G, w)
    send = [x.narrow(sd, o, s).contiguous().reshape(-1)
            for o, s in zip(offsets(spieces), spieces)]
    in_splits = [t.numel() for t in send]
    shapes = []
    for j in range(w):
        sh = list(x.shape)
        sh[sd] = spieces[r]
        sh[gd] = gpieces[j]
        shapes.append(sh)
    out_splits = [int(torch.tensor(sh).prod()) for sh in shapes]
    recv = torch.empty(sum(out_splits), dtype=x.dtype)
    dist.all_to_all_single(recv, torch.cat(send), out_splits, in_splits,
                           group=group)
    parts = [p.reshape(sh) for p, sh in zip(torch.split(recv, out_splits), shapes)]
    return torch.cat(parts, gd)


def all_to_all_rows(x, in_splits, out_splits, group=None):
    """all_to_all_v along dim 0 with row counts."""
    inner = x[0].numel() if x.shape[0] else int(torch.tensor(x.shape[1:]).prod())
    recv = torch.empty(sum(out_splits) * inner, dtype=x.dtype)
    dist.all_to_all_single(recv, x.contiguous().reshape(-1),
                           [s * inner for s in out_splits],
                           [s * inner for s in in_splits], group=group)
    return recv.reshape(sum(out_splits), *x.shape[1:])


def all_reduce(x, op=dist.ReduceOp.SUM, group=None):
    y = x.clone()
    dist.all_reduce(y, op=op, group=group)
    return y


def reduce_scatter(x, dim, sizes=None, group=None):
    """Piece r along dim of the sum (gloo has no reduce_scatter: reduce
    everything, keep the piece)."""
    w, r = dist.get_world_size(group), dist.get_rank(group)
    dim = dim % x.dim()
    sizes = sizes or rule(x.shape[dim], w)
    return all_reduce(x, group=group).narrow(dim, offsets(sizes)[r], sizes[r])


def all_gather_object(obj, group=None):
    out = [None] * dist.get_world_size(group)
    dist.all_gather_object(out, obj, group=group)
    return out
