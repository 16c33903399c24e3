"""Sequence-parallel autograd functions with the seeds' names and arguments
(MindSpeed's communication module): split/gather pairs with grad_scale,
Ulysses all_to_all, zigzag (load-balanced) context-parallel split/gather,
packed varlen split/gather.

process_group is a spcoll.Group (None: the sequence-parallel group set with
spcoll.set_sequence_parallel_group). Each backward is one spcoll op: the
gradient op of libspclient with the seeds' scaling, so no extra scaling
pass runs in torch. Which op is each backward, and its default scale,
come from the library's op list (ops.gradient), not from this file.
"""
import torch

from . import ops
from .ops import split_sizes as cal_split_sizes
from .state import resolve

__all__ = [
    "cal_split_sizes", "cal_split_sizes_multi",
    "split_forward_gather_backward", "gather_forward_split_backward",
    "all_to_all", "load_balanced_split_forward_gather_backward",
    "load_balanced_gather_forward_split_backward",
    "packed_data_split_forward_gather_backward",
    "packed_data_gather_forward_split_backward",
    "gather_forward_split_backward_and_unpad",
]


def cal_split_sizes_multi(seq_lens, world_size):
    """[world_size, len(seq_lens)] int64 table: row r is rank r's share of
    each sequence under the rule (the packed gather's sizes table)."""
    cols = [cal_split_sizes(n, world_size) for n in seq_lens]
    return torch.tensor([[c[r] for c in cols] for r in range(world_size)],
                        dtype=torch.int64).reshape(world_size, len(cols))


def _size_list(sizes, what):
    if sizes is None:
        return None
    if isinstance(sizes, torch.Tensor):
        return [int(s) for s in sizes.tolist()]
    if not isinstance(sizes, (list, tuple)):
        raise ValueError("spcoll: %s must be a list if provided, got %s"
                         % (what, type(sizes).__name__))
    return [int(s) for s in sizes]


class _SplitForwardGatherBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input_, group, dim, split_sizes, grad_scale):
        if split_sizes is None:
            # Known seed defect: without sizes, an unaligned split broke in
            # backward. The rule's sizes are fixed here, so backward gathers
            # exactly the pieces forward made.
            d = ops._dim(input_, dim)
            split_sizes = cal_split_sizes(input_.shape[d], group.size)
        ctx.group, ctx.dim, ctx.sizes, ctx.scale = group, dim, split_sizes, grad_scale
        return ops.split(input_, group, dim, split_sizes)

    @staticmethod
    def backward(ctx, grad_output):
        grad_fn, _ = ops.gradient("split")
        g = grad_fn(grad_output, ctx.group, ctx.dim, ctx.sizes, scale=ctx.scale)
        return g, None, None, None, None


class _GatherForwardSplitBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input_, group, dim, gather_sizes, grad_scale):
        ctx.group, ctx.dim, ctx.sizes, ctx.scale = group, dim, gather_sizes, grad_scale
        return ops.all_gather(input_, group, dim, gather_sizes)

    @staticmethod
    def backward(ctx, grad_output):
        grad_fn, _ = ops.gradient("all_gather")
        g = grad_fn(grad_output, ctx.group, ctx.dim, ctx.sizes, scale=ctx.scale)
        return g, None, None, None, None


def split_forward_gather_backward(input_, process_group=None, dim=-1,
                                  split_sizes=None,
                                  grad_scale=ops.gradient("split")[1]):
    """Forward: this rank's piece of input_ along dim (split_sizes, or the
    rule). Backward: the gather of every rank's gradient, scaled by
    grad_scale ('down' divides by the group size, 'up' multiplies, None)."""
    group = resolve(process_group)
    ops._scale(grad_scale)
    sizes = _size_list(split_sizes, "split_sizes")
    return _SplitForwardGatherBackward.apply(input_, group, dim, sizes,
                                             grad_scale)


def gather_forward_split_backward(input_, process_group=None, dim=-1,
                                  gather_sizes=None,
                                  grad_scale=ops.gradient("all_gather")[1]):
    """Forward: every rank's input_ concatenated along dim (gather_sizes:
    every rank's size along dim when they differ). Backward: this rank's
    own piece of its own gradient, scaled by grad_scale (default 'up')."""
    group = resolve(process_group)
    ops._scale(grad_scale)
    sizes = _size_list(gather_sizes, "gather_sizes")
    return _GatherForwardSplitBackward.apply(input_, group, dim, sizes,
                                             grad_scale)


class _AllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input_, group, scatter_dim, gather_dim, gather_size):
        ctx.group, ctx.sd, ctx.gd = group, scatter_dim, gather_dim
        ctx.scatter_size = input_.shape[ops._dim(input_, scatter_dim, "scatter_dim")]
        return ops.all_to_all(input_, group, scatter_dim, gather_dim, gather_size)

    @staticmethod
    def backward(ctx, grad_output):
        # the reverse exchange; the forward input's size on scatter_dim is
        # the total it gathers back
        grad_fn, _ = ops.gradient("all_to_all")
        g = grad_fn(grad_output, ctx.group, ctx.gd, ctx.sd, ctx.scatter_size)
        return g, None, None, None, None


def all_to_all(input_, process_group=None, scatter_dim=2, gather_dim=1,
               gather_size=None):
    """Ulysses exchange: input_ cut in w pieces along scatter_dim (rule),
    piece j to rank j; received pieces concatenated along gather_dim.
    gather_size: the total along gather_dim when ranks hold different
    sizes there. Any dim pair, 2-D to 8-D. Backward: the reverse."""
    group = resolve(process_group)
    return _AllToAll.apply(input_, group, scatter_dim, gather_dim, gather_size)


class _ZigzagSplit(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input_, group, dim):
        ctx.group, ctx.dim = group, dim
        return ops.zigzag_split(input_, group, dim)

    @staticmethod
    def backward(ctx, grad_output):
        # gather, divide by cp, natural order: one op
        grad_fn, scale = ops.gradient("zigzag_split")
        return grad_fn(grad_output, ctx.group, ctx.dim, scale=scale), None, None


class _ZigzagGather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input_, group, dim):
        ctx.group, ctx.dim = group, dim
        return ops.zigzag_gather(input_, group, dim)

    @staticmethod
    def backward(ctx, grad_output):
        # multiply by cp, keep chunks r and 2cp-1-r
        grad_fn, scale = ops.gradient("zigzag_gather")
        return grad_fn(grad_output, ctx.group, ctx.dim, scale=scale), None, None


def load_balanced_split_forward_gather_backward(input_, process_group=None,
                                                dim=0):
    """Zigzag (ring attention) split: the sequence along dim in 2*cp chunks;
    rank r keeps chunks r and 2*cp-1-r. Backward: gather, /cp, reorder."""
    group = resolve(process_group)
    return _ZigzagSplit.apply(input_, group, dim)


def load_balanced_gather_forward_split_backward(input_, process_group=None,
                                                dim=0):
    """Inverse of the zigzag split (natural order restored). Backward: *cp,
    keep chunks r and 2*cp-1-r."""
    group = resolve(process_group)
    return _ZigzagGather.apply(input_, group, dim)


class _PackedSplit(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group, seq_lens, dim):
        ctx.group, ctx.seq_lens, ctx.dim = group, seq_lens, dim
        ctx.total = x.shape[ops._dim(x, dim)]
        return ops.packed_split(x, group, seq_lens, dim)

    @staticmethod
    def backward(ctx, grad_output):
        grad_fn, scale = ops.gradient("packed_split")
        g = grad_fn(grad_output, ctx.group, ctx.seq_lens, ctx.dim, scale=scale,
                    total=ctx.total)
        return g, None, None, None


class _PackedGather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group, seq_lens, dim):
        ctx.group, ctx.seq_lens, ctx.dim = group, seq_lens, dim
        return ops.packed_gather(x, group, seq_lens, dim)

    @staticmethod
    def backward(ctx, grad_output):
        grad_fn, scale = ops.gradient("packed_gather")
        g = grad_fn(grad_output, ctx.group, ctx.seq_lens, ctx.dim, scale=scale)
        return g, None, None, None


def packed_data_split_forward_gather_backward(hidden_states,
                                              process_group=None,
                                              sequence_lengths=None, dim=0):
    """Packed varlen split: sequences of sequence_lengths packed along dim;
    each is split over the ranks by the rule and rank r keeps its pieces,
    concatenated. Backward: the full gradient (/w) from every rank."""
    group = resolve(process_group)
    lens = ops._seq_lens(sequence_lengths)
    return _PackedSplit.apply(hidden_states, group, lens, dim)


def packed_data_gather_forward_split_backward(local_hidden_states,
                                              all_split_sizes,
                                              process_group=None, dim=0):
    """Rebuild the packed sequences from every rank's pieces.
    all_split_sizes: [world, nseq] (row r = rank r's share of each
    sequence). The rule's table (cal_split_sizes_multi) runs as one spcoll
    op; any other table gathers the ranks' pieces and reorders them in torch
    (still exact, one more copy). Backward: own pieces, *w."""
    group = resolve(process_group)
    table = all_split_sizes
    if isinstance(table, torch.Tensor):
        table = table.tolist()
    table = [[int(v) for v in row] for row in table]
    if len(table) != group.size or len({len(r) for r in table}) != 1:
        raise ValueError("spcoll packed gather: all_split_sizes must be "
                         "[world=%d, nseq], got %r" % (group.size, table))
    # This rank's size is checked by the op itself, which then fails on
    # every rank instead of leaving the others waiting.
    lens = [sum(col) for col in zip(*table)]
    if [list(r) for r in cal_split_sizes_multi(lens, group.size).tolist()] == table:
        return _PackedGather.apply(local_hidden_states, group, lens, dim)
    totals = [sum(r) for r in table]
    full = gather_forward_split_backward(local_hidden_states, group, dim,
                                         totals, "up")
    per_rank = [list(torch.split(c, row, dim))
                for c, row in zip(torch.split(full, totals, dim), table)]
    pieces = [per_rank[r][s] for s in range(len(lens))
              for r in range(group.size)]
    return torch.cat(pieces, dim)


def gather_forward_split_backward_and_unpad(input_, group=None, dim=1,
                                            padding_size=0, unpad_dim=None):
    """LightRFT's gather: every rank's input_ concatenated along dim, then
    the last padding_size positions dropped along unpad_dim (default dim).
    Backward: the gradient zero-padded back, this rank's own piece,
    unscaled."""
    group = resolve(group)
    out = _GatherForwardSplitBackward.apply(input_, group, dim, None, None)
    if padding_size:
        d = ops._dim(out, dim if unpad_dim is None else unpad_dim, "unpad_dim")
        if padding_size < 0 or padding_size > out.shape[d]:
            raise ValueError("spcoll: padding_size %d is outside 0..%d (the "
                             "gathered size along dim %d)"
                             % (padding_size, out.shape[d], d))
        out = out.narrow(d, 0, out.shape[d] - padding_size).contiguous()
    return out
