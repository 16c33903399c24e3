"""LightRFT's SPDataProcessor: the ranks of a sequence-parallel group work
on the same samples, so each rank's samples are pooled before the SP
forward (preprocess) and each rank takes back its own share of the results
(postprocess)."""
import torch

from . import ops
from . import state


class SPDataProcessor:
    """with SPDataProcessor() as p:
           batch = p.preprocess(my_samples)   # every rank: all ranks' samples
           ...                                 # sequence-parallel work
           mine = p.postprocess(results)       # this rank's share back

    group: the SP group (default: the one set with
    spcoll.set_sequence_parallel_group). With no group or a group of one,
    both calls return their data unchanged."""

    def __init__(self, group=None):
        self.group = group if group is not None else state.get_sequence_parallel_group()
        self.sp_size = self.group.size if self.group is not None else 1
        self.sp_rank = self.group.rank if self.group is not None else 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def preprocess(self, data):
        """Concatenation in rank order of every rank's data: a tensor (along
        dim 0; sizes may differ) or a list/tuple of anything picklable."""
        if self.sp_size <= 1:
            return data
        if isinstance(data, torch.Tensor):
            sizes = ops.all_gather_sizes(data.shape[0] if data.dim() else 1,
                                         self.group)
            return ops.all_gather(data, self.group, 0, sizes)
        if not isinstance(data, (list, tuple)):
            raise TypeError("spcoll SPDataProcessor.preprocess: data must be a "
                            "tensor, list or tuple, got %s" % type(data).__name__)
        out = []
        for part in ops.all_gather_object(list(data), self.group):
            out.extend(part)
        return type(data)(out) if isinstance(data, tuple) else out

    def postprocess(self, data):
        """This rank's equal share of data (a tensor along dim 0, or a
        sequence). AssertionError when the length does not divide by the
        SP size."""
        if self.sp_size <= 1:
            return data
        n = len(data)
        assert n % self.sp_size == 0, (
            "spcoll SPDataProcessor.postprocess: %d items do not divide by "
            "sp_size %d" % (n, self.sp_size))
        c = n // self.sp_size
        return data[self.sp_rank * c:(self.sp_rank + 1) * c]
