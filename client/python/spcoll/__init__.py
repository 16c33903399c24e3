"""spcoll: sequence-parallel collectives from spcolld, for PyTorch.

    import spcoll
    g = spcoll.join("job42", world_size, rank)   # blocks until all joined
    spcoll.set_sequence_parallel_group(g)
    y = spcoll.all_to_all(x, g, scatter_dim=2, gather_dim=1)   # autograd

Modules: ops (the collectives, no autograd), autograd (MindSpeed's names:
split/gather pairs, all_to_all, zigzag, packed), hybrid (ring x Ulysses
context parallelism), mappings (Megatron's tensor_parallel.mappings),
batch (padding/slicing: sp_slice_and_pad_input, apply_sequence_parallelism),
hooks (axolotl's SequenceParallelContextManager), data (SPDataProcessor),
ulysses (ulysses_attention). See docs/python-api.md (docs/python.md for
the torch.distributed backend "spcoll").
"""
from . import _lib
from ._lib import SPC_MAX_DIMS
from .errors import SpcollError, SpcollValueError, GpuPathUnavailable
from .client import Client, Group, connect, default_client, default_socket, join
from .state import (set_sequence_parallel_group, get_sequence_parallel_group,
                    get_sequence_parallel_world_size, get_sequence_parallel_rank,
                    set_tensor_model_parallel_group,
                    get_tensor_model_parallel_group)
from . import ops, autograd, hybrid, mappings, batch, hooks, data, ulysses
from .ops import split_sizes, all_gather_object, barrier
from .autograd import (cal_split_sizes, cal_split_sizes_multi,
                       split_forward_gather_backward,
                       gather_forward_split_backward,
                       gather_forward_split_backward_and_unpad, all_to_all,
                       load_balanced_split_forward_gather_backward,
                       load_balanced_gather_forward_split_backward,
                       packed_data_split_forward_gather_backward,
                       packed_data_gather_forward_split_backward)
from .hybrid import (ParallelState, get_parallel_state, set_parallel_state,
                     initialize_context_parallel,
                     split_forward_gather_backward_with_cp,
                     gather_forward_split_backward_with_cp,
                     packed_data_split_forward_gather_backward_with_cp,
                     packed_data_gather_forward_split_backward_with_cp)
from .batch import (sp_pad_len, keep_mask, sp_slice_and_pad_input,
                    apply_sequence_parallelism)
from .hooks import AllGatherWithGrad, SequenceParallelContextManager
from .data import SPDataProcessor
from .ulysses import ulysses_attention
from . import distributed   # registers torch.distributed backend "spcoll"

__version__ = "0.1.0"


def gpu_path_available():
    """Whether CUDA tensors can be used here: torch sees a GPU and
    libspclient can load the CUDA driver (spc_gpu_probe). The daemon's own
    GPU support is known only at the first device buffer: without it,
    that op raises GpuPathUnavailable, saying why."""
    import ctypes
    import torch
    if not torch.cuda.is_available():
        return False
    n = ctypes.c_int()
    return _lib.lib.spc_gpu_probe(ctypes.byref(n)) == 0 and n.value > 0
