"""Megatron core's tensor_parallel.mappings over spcoll: the same names
and arguments. group=None means the tensor-model-parallel group set with
spcoll.set_tensor_model_parallel_group, else the sequence-parallel group.

Differences from Megatron, on purpose:
- _reduce is out of place (Megatron all-reduces its input in place, which
  is lost on a non-contiguous input).
- splits along an unaligned dim follow the seeds' rule instead of failing.
- use_global_buffer is accepted and ignored: outputs always live in spcoll
  memory already.
"""
import torch

from . import ops
from . import state


def _group(group):
    return state.resolve(group, state.get_tensor_model_parallel_group())


def _sizes(s):
    if s is None:
        return None
    return [int(v) for v in (s.tolist() if isinstance(s, torch.Tensor) else s)]


# ---- the functional pieces (no autograd) ----------------------------------

def _reduce(input_, group=None):
    """All-reduce (sum) over the group."""
    return ops.all_reduce(input_, _group(group))


def _split_along_last_dim(input_, group=None):
    return ops.split(input_, _group(group), -1)


def _split_along_first_dim(input_, group=None):
    return ops.split(input_, _group(group), 0)


def _gather_along_last_dim(input_, group=None):
    return ops.all_gather(input_, _group(group), -1)


def _reduce_scatter_along_last_dim(input_, group=None):
    return ops.reduce_scatter(input_, _group(group), -1)


def _gather_along_first_dim(input_, group=None, output_split_sizes=None,
                            use_global_buffer=False):
    return ops.all_gather(input_, _group(group), 0, _sizes(output_split_sizes))


def _reduce_scatter_along_first_dim(input_, group=None, input_split_sizes=None,
                                    use_global_buffer=False):
    return ops.reduce_scatter(input_, _group(group), 0,
                              _sizes(input_split_sizes))


# ---- autograd functions ----------------------------------------------------

class _CopyToModelParallelRegion(torch.autograd.Function):
    """Forward: identity. Backward: all-reduce."""

    @staticmethod
    def forward(ctx, input_, group):
        ctx.group = group
        return input_.view_as(input_)

    @staticmethod
    def backward(ctx, grad_output):
        return ops.all_reduce(grad_output, ctx.group), None


class _ReduceFromModelParallelRegion(torch.autograd.Function):
    """Forward: all-reduce. Backward: identity."""

    @staticmethod
    def forward(ctx, input_, group):
        return ops.all_reduce(input_, group)

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output, None


class _ScatterToModelParallelRegion(torch.autograd.Function):
    """Forward: split along the last dim. Backward: all-gather it."""

    @staticmethod
    def forward(ctx, input_, group):
        ctx.group = group
        ctx.sizes = ops.split_sizes(input_.shape[-1], group.size)
        return ops.split(input_, group, -1, ctx.sizes)

    @staticmethod
    def backward(ctx, grad_output):
        return ops.all_gather(grad_output, ctx.group, -1, ctx.sizes), None


class _GatherFromModelParallelRegion(torch.autograd.Function):
    """Forward: all-gather along the last dim. Backward: own split."""

    @staticmethod
    def forward(ctx, input_, group):
        ctx.group = group
        return ops.all_gather(input_, group, -1)

    @staticmethod
    def backward(ctx, grad_output):
        return ops.split(grad_output, ctx.group, -1), None


class _ScatterToSequenceParallelRegion(torch.autograd.Function):
    """Forward: split along the first dim. Backward: all-gather it."""

    @staticmethod
    def forward(ctx, input_, group):
        ctx.group = group
        ctx.sizes = ops.split_sizes(input_.shape[0], group.size)
        return ops.split(input_, group, 0, ctx.sizes)

    @staticmethod
    def backward(ctx, grad_output):
        return ops.all_gather(grad_output, ctx.group, 0, ctx.sizes), None


class _GatherFromSequenceParallelRegion(torch.autograd.Function):
    """Forward: all-gather along the first dim. Backward: reduce-scatter
    (tensor_parallel_output_grad, the default: this rank's slice of the
    sum) or this rank's own slice of its own gradient."""

    @staticmethod
    def forward(ctx, input_, group, tensor_parallel_output_grad=True,
                output_split_sizes=None, use_global_buffer=False):
        ctx.group, ctx.tpog = group, tensor_parallel_output_grad
        ctx.sizes = _sizes(output_split_sizes)
        return ops.all_gather(input_, group, 0, ctx.sizes)

    @staticmethod
    def backward(ctx, grad_output):
        if ctx.tpog:
            g = ops.reduce_scatter(grad_output, ctx.group, 0, ctx.sizes)
        else:
            g = ops.split(grad_output, ctx.group, 0, ctx.sizes)
        return g, None, None, None, None


class _ReduceScatterToSequenceParallelRegion(torch.autograd.Function):
    """Forward: reduce-scatter along the first dim. Backward: all-gather."""

    @staticmethod
    def forward(ctx, input_, group, input_split_sizes=None,
                use_global_buffer=False):
        ctx.group = group
        ctx.sizes = _sizes(input_split_sizes)
        if ctx.sizes is None:
            ctx.sizes = ops.split_sizes(input_.shape[0], group.size)
        return ops.reduce_scatter(input_, group, 0, ctx.sizes)

    @staticmethod
    def backward(ctx, grad_output):
        return ops.all_gather(grad_output, ctx.group, 0, ctx.sizes), None, None, None


class _AllGatherFromTensorParallelRegion(torch.autograd.Function):
    """Forward: all-gather along the last dim. Backward: reduce-scatter."""

    @staticmethod
    def forward(ctx, input_, group):
        ctx.group = group
        return ops.all_gather(input_, group, -1)

    @staticmethod
    def backward(ctx, grad_output):
        return ops.reduce_scatter(grad_output, ctx.group, -1), None


class _ReduceScatterToTensorParallelRegion(torch.autograd.Function):
    """Forward: reduce-scatter along the last dim. Backward: all-gather."""

    @staticmethod
    def forward(ctx, input_, group):
        ctx.group = group
        ctx.sizes = ops.split_sizes(input_.shape[-1], group.size)
        return ops.reduce_scatter(input_, group, -1, ctx.sizes)

    @staticmethod
    def backward(ctx, grad_output):
        return ops.all_gather(grad_output, ctx.group, -1, ctx.sizes), None


class _AllToAll(torch.autograd.Function):
    """all_to_all_v along dim 0; backward swaps the split lists."""

    @staticmethod
    def forward(ctx, group, input, output_split_sizes, input_split_sizes):
        ctx.group = group
        n, w, r = input.shape[0], group.size, group.rank
        ins = input_split_sizes or ops.split_sizes(n, w)
        outs = output_split_sizes or [ops.split_sizes(n, w)[r]] * w
        ctx.ins, ctx.outs = ins, outs
        return ops.all_to_all_v(input, group, ins, outs)

    @staticmethod
    def backward(ctx, *grad_output):
        g = ops.all_to_all_v(grad_output[0], ctx.group, ctx.outs, ctx.ins)
        return None, g, None, None


# ---- the public wrappers --------------------------------------------------

def copy_to_tensor_model_parallel_region(input_, group=None):
    """Forward: copy; backward: all-reduce."""
    return _CopyToModelParallelRegion.apply(input_, _group(group))


def reduce_from_tensor_model_parallel_region(input_, group=None):
    """Forward: all-reduce; backward: copy."""
    return _ReduceFromModelParallelRegion.apply(input_, _group(group))


def scatter_to_tensor_model_parallel_region(input_, group=None):
    """Forward: split along the last dim; backward: all-gather."""
    return _ScatterToModelParallelRegion.apply(input_, _group(group))


def gather_from_tensor_model_parallel_region(input_, group=None):
    """Forward: all-gather along the last dim; backward: split."""
    return _GatherFromModelParallelRegion.apply(input_, _group(group))


def scatter_to_sequence_parallel_region(input_, group=None):
    """Forward: split along the first dim; backward: all-gather."""
    return _ScatterToSequenceParallelRegion.apply(input_, _group(group))


def gather_from_sequence_parallel_region(input_, tensor_parallel_output_grad=True,
                                         group=None, output_split_sizes=None,
                                         use_global_buffer=False):
    """Forward: all-gather along the first dim (output_split_sizes: every
    rank's rows); backward: reduce-scatter, or own split when
    tensor_parallel_output_grad is False."""
    return _GatherFromSequenceParallelRegion.apply(
        input_, _group(group), bool(tensor_parallel_output_grad),
        _sizes(output_split_sizes), use_global_buffer)


def reduce_scatter_to_sequence_parallel_region(input_, group=None,
                                               input_split_sizes=None,
                                               use_global_buffer=False):
    """Forward: reduce-scatter along the first dim; backward: all-gather."""
    return _ReduceScatterToSequenceParallelRegion.apply(
        input_, _group(group), _sizes(input_split_sizes), use_global_buffer)


def all_gather_last_dim_from_tensor_parallel_region(input_, group=None):
    """Forward: all-gather along the last dim; backward: reduce-scatter."""
    return _AllGatherFromTensorParallelRegion.apply(input_, _group(group))


def reduce_scatter_last_dim_to_tensor_parallel_region(input_, group=None):
    """Forward: reduce-scatter along the last dim; backward: all-gather."""
    return _ReduceScatterToTensorParallelRegion.apply(input_, _group(group))


def all_to_all(group, input_, output_split_sizes_=None, input_split_sizes=None):
    """all_to_all_v along dim 0 with per-peer split lists (None: equal
    pieces by the rule); backward swaps them."""
    return _AllToAll.apply(_group(group), input_, _sizes(output_split_sizes_),
                           _sizes(input_split_sizes))


def all_to_all_sp2hp(input_, group=None):
    """[num_tokens/TP, H] (any leading dims, seen as [n, H]) ->
    [num_tokens, H/TP]. Backward: hp2sp."""
    from .autograd import all_to_all as a2a
    x = input_.reshape(-1, input_.shape[-1])
    return a2a(x, _group(group), scatter_dim=1, gather_dim=0)


def all_to_all_hp2sp(input_, group=None):
    """[num_tokens, H/TP] -> [num_tokens/TP, H]. Backward: sp2hp."""
    from .autograd import all_to_all as a2a
    x = input_.reshape(-1, input_.shape[-1])
    return a2a(x, _group(group), scatter_dim=0, gather_dim=1)
