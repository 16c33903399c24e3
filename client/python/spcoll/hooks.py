"""axolotl's sequence-parallel context manager: hooks on a model that pad
and slice each batch before forward and gather the outputs after.

Torch 2.0 and later get kwargs forward pre-hooks (as axolotl registers);
torch 1.13 hooks see positional arguments only, so there the forward is
wrapped for the duration of the context instead (same effect, undone on
exit). Outputs are gathered by a forward hook on every version.
"""
import collections.abc
import functools
import inspect

import torch

from . import ops
from . import state
from .batch import apply_sequence_parallelism

_KW_HOOKS = "with_kwargs" in inspect.signature(
    torch.nn.Module.register_forward_pre_hook).parameters


class AllGatherWithGrad(torch.autograd.Function):
    """All-gather along dim 1 of tensors whose dim-1 sizes may differ by
    rank (gathered first); backward: this rank's slice of the gradient,
    unscaled."""

    @staticmethod
    def forward(ctx, input_tensor, group):
        group = state.resolve(group)
        sizes = ops.all_gather_sizes(input_tensor.size(1), group)
        ctx.group, ctx.sizes = group, sizes
        return ops.all_gather(input_tensor, group, 1, sizes)

    @staticmethod
    def backward(ctx, grad_output):
        return ops.split(grad_output, ctx.group, 1, ctx.sizes), None


class SequenceParallelContextManager:
    """Within the context, each models[i](...) call gets its batch padded
    and sliced for this rank (apply_sequence_parallelism) and, with
    gather_outputs, returns outputs gathered over the group along dim 1
    with the padding removed.

    models: one module or a list; group: the SP group (default: the one
    set with spcoll.set_sequence_parallel_group); sequence_parallel_degree
    is checked against the group's size when given. ring_attn_func and
    heads_k_stride are accepted for axolotl's signature and unused."""

    def __init__(self, models, sequence_parallel_degree=None,
                 gradient_accumulation_steps=1, ring_attn_func=None,
                 heads_k_stride=None, gather_outputs=True, group=None):
        self.models = list(models) if isinstance(models, (list, tuple)) else [models]
        self.process_group = state.resolve(group)
        self.local_rank = self.process_group.rank
        self.local_world_size = self.process_group.size
        if (sequence_parallel_degree is not None and
                int(sequence_parallel_degree) != self.local_world_size):
            raise ValueError("spcoll: sequence_parallel_degree %d differs from "
                             "the group's size %d" % (sequence_parallel_degree,
                                                      self.local_world_size))
        self.sequence_parallel_degree = self.local_world_size
        self.gradient_accumulation_steps = gradient_accumulation_steps
        self.ring_attn_func = ring_attn_func
        self.heads_k_stride = heads_k_stride
        self.gather_outputs = gather_outputs
        self.hook_handles = []
        self._wrapped = []
        self.original_seq_len = 0
        self.pad_len = 0

    def __enter__(self):
        for m in self.models:
            self._attach(m)
        return self

    def __exit__(self, exc_type, exc, tb):
        for h in self.hook_handles:
            h.remove()
        self.hook_handles = []
        for m, had in self._wrapped:
            if had is None:
                del m.forward  # the instance attribute; the class's returns
            else:
                m.forward = had
        self._wrapped = []

    # -- pre-forward --
    def _prepare(self, model, args, kwargs):
        """Positional args bound to their names, the batch sliced."""
        names = list(inspect.signature(model.forward).parameters)
        kw = dict(kwargs)
        for i, a in enumerate(args[:len(names)]):
            kw[names[i]] = a
        kw, self.original_seq_len, self.pad_len = apply_sequence_parallelism(
            kw, self.local_rank, self.local_world_size,
            self.gradient_accumulation_steps, self.ring_attn_func)
        return tuple(args[len(names):]), kw

    def _attach(self, model):
        if _KW_HOOKS:
            def pre(mod, args, kwargs):
                return self._prepare(mod, args, kwargs)
            self.hook_handles.append(
                model.register_forward_pre_hook(pre, with_kwargs=True))
        else:
            inner = model.forward
            had = model.__dict__.get("forward")   # an instance attribute

            @functools.wraps(inner)
            def forward(*args, **kwargs):
                args, kwargs = self._prepare(model, args, kwargs)
                return inner(*args, **kwargs)
            model.forward = forward
            self._wrapped.append((model, had))
        if self.gather_outputs:
            self.hook_handles.append(model.register_forward_hook(
                lambda mod, inp, out: self._gather(out)))

    # -- post-forward --
    def _one(self, v):
        if not isinstance(v, torch.Tensor) or v.dim() <= 1:
            return v
        v = AllGatherWithGrad.apply(v, self.process_group)
        if self.pad_len and v.size(1) == self.original_seq_len + self.pad_len:
            v = v[:, :self.original_seq_len].contiguous()
        return v

    def _gather(self, out):
        if isinstance(out, torch.Tensor):
            return self._one(out)
        if isinstance(out, collections.abc.MutableMapping):
            for k in list(out.keys()):
                out[k] = self._one(out[k])
            return out
        if isinstance(out, tuple):
            return type(out)(*map(self._one, out)) if hasattr(out, "_fields") \
                else tuple(map(self._one, out))
        if isinstance(out, list):
            return [self._one(v) for v in out]
        return out
