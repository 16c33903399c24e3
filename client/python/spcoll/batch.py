"""Batch preparation for sequence parallelism (local: no communication).

A [b, L, ...] batch is padded along the sequence so L divides by the group
size w: pad = (w - L % w) % w, labels with -100 and everything else with 0;
rank r keeps chunk r of length c = (L + pad) / w. The index math (pad
length, logits_to_keep mask) is libspclient's, so C and Python trainers
agree on it; the slicing is torch's (autograd flows through it).
"""
import ctypes

import torch

from . import _lib
from . import state

lib = _lib.lib


def sp_pad_len(seq_len, world):
    """(world - seq_len % world) % world."""
    n = lib.spc_sp_pad_len(int(seq_len), int(world))
    if n < 0:
        raise ValueError("spcoll: sp_pad_len(seq_len=%r, world=%r): seq_len "
                         "must be >= 0 and world >= 1" % (seq_len, world))
    return n


def keep_mask(seq_len, logits_to_keep, world, rank):
    """An integer logits_to_keep as this rank's bool mask over its padded
    chunk: True where the global position is one of the last
    logits_to_keep real tokens (0 keeps them all); pad tokens never are.
    (axolotl flags a pad token on the last rank when L % w != 0.)"""
    c = (int(seq_len) + sp_pad_len(seq_len, world)) // int(world)
    buf = (ctypes.c_uint8 * max(c, 1))()
    rc = lib.spc_sp_keep_mask(int(seq_len), int(logits_to_keep), int(world),
                              int(rank), buf)
    if rc < 0:
        raise ValueError("spcoll: keep_mask(seq_len=%r, logits_to_keep=%r, "
                         "world=%r, rank=%r): bad argument"
                         % (seq_len, logits_to_keep, world, rank))
    return torch.tensor(list(buf[:c]), dtype=torch.bool)


def pad_and_slice(x, dim, world, rank, fill=0):
    """Pad x along dim to a multiple of world with `fill`, keep chunk rank."""
    d = dim % x.dim()
    L = x.shape[d]
    pad = sp_pad_len(L, world)
    if pad:
        shape = list(x.shape)
        shape[d] = pad
        x = torch.cat([x, x.new_full(shape, fill)], d)
    c = (L + pad) // world
    return x.narrow(d, rank * c, c).contiguous()


def _sp(group):
    if group is None:
        return (state.get_sequence_parallel_world_size(),
                state.get_sequence_parallel_rank())
    return group.size, group.rank


def sp_slice_and_pad_input(input_ids, position_ids=None, group=None):
    """LightRFT's pre-forward for Ulysses: pad input_ids and position_ids
    along the last dim to a multiple of the SP size (input_ids with 0,
    position ids continued 0, 1, ...), slice only input_ids. Returns
    (sliced input_ids, padded position_ids, pad size). Any batch size (the
    seed asserts 1 with position_ids; rows are padded alike)."""
    w, r = _sp(group)
    L = input_ids.shape[-1]
    pad = sp_pad_len(L, w)
    ids = pad_and_slice(input_ids, -1, w, r, 0)
    if position_ids is not None and pad:
        extra = torch.arange(pad, dtype=position_ids.dtype,
                             device=position_ids.device)
        extra = extra.expand(*position_ids.shape[:-1], pad)
        position_ids = torch.cat([position_ids, extra], -1)
    return ids, position_ids, pad


def apply_sequence_parallelism(batch, local_rank, local_world_size,
                               gradient_accumulation_steps=1,
                               ring_attn_func=None):
    """axolotl's batch slicing: every [b, L, ...] tensor of the batch (L =
    input_ids' length) padded and sliced along dim 1; position_ids made
    (arange) when missing; an integer logits_to_keep turned into this
    rank's mask (aligned with the padded chunks, unlike the seed);
    num_items_in_batch recounted from the local labels times the
    accumulation steps. Returns (new batch, original length, pad length);
    the caller's dict is not changed. ring_attn_func is accepted and
    ignored (no ring attention kernels here)."""
    batch = dict(batch)
    w, r = int(local_world_size), int(local_rank)
    if "input_ids" not in batch or batch["input_ids"] is None:
        raise ValueError("spcoll: apply_sequence_parallelism needs "
                         "batch['input_ids'] to know the sequence length")
    ids = batch["input_ids"]
    L = ids.size(1)
    if batch.get("position_ids") is None:
        batch["position_ids"] = torch.arange(
            L, dtype=torch.long, device=ids.device).expand(ids.size(0), -1)
    pad = sp_pad_len(L, w)
    keep = batch.get("logits_to_keep")
    if isinstance(keep, int) and not isinstance(keep, bool):
        batch["logits_to_keep"] = keep_mask(L, keep, w, r).to(ids.device)
    elif isinstance(keep, torch.Tensor) and keep.dim() == 1 and keep.numel() == L:
        # a mask over the sequence: pad positions are never kept
        batch["logits_to_keep"] = pad_and_slice(keep.bool(), 0, w, r, False)
    for key, v in batch.items():
        if isinstance(v, torch.Tensor) and v.dim() > 1 and v.size(1) == L:
            batch[key] = pad_and_slice(v, 1, w, r, -100 if key == "labels" else 0)
    if "num_items_in_batch" in batch and batch.get("labels") is not None:
        batch["num_items_in_batch"] = (
            (batch["labels"] != -100).sum() * int(gradient_accumulation_steps))
    return batch, L, pad
