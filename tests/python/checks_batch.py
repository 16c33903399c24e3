"""Batch preparation and model hooks: LightRFT's sp_slice_and_pad_input and
SPDataProcessor, axolotl's apply_sequence_parallelism, AllGatherWithGrad and
SequenceParallelContextManager (against a single-process run of the same
model, gradients summed with gloo)."""
import torch
import torch.nn.functional as F

import spcoll
import gloo_ref as ref
from checks_seq import fwd_bwd
from registry import check


def pad_chunk(t, dim, w, r, fill):
    L = t.shape[dim]
    pad = (w - L % w) % w
    shape = list(t.shape)
    shape[dim] = pad
    t = torch.cat([t, torch.full(shape, fill, dtype=t.dtype)], dim)
    c = (L + pad) // w
    return t.narrow(dim, r * c, c)


@check()
def lightrft_slice_and_pad(ctx):
    w, r, g = ctx.world, ctx.rank, ctx.group
    for b, L, packed in ((1, 5, False), (1, 4 * w, False), (2, 7, True)):
        ids = ctx.data([b, L], torch.int64)
        pos = torch.arange(L).repeat(b, 1)
        if packed:
            pos = torch.cat([torch.arange(3), torch.arange(L - 3)]).repeat(b, 1)
        got_ids, got_pos, pad = spcoll.sp_slice_and_pad_input(ids, pos, g)
        want_pad = (w - L % w) % w
        ctx.true("L=%d pad" % L, pad == want_pad, "%d != %d" % (pad, want_pad))
        ctx.same("L=%d input_ids" % L, got_ids, pad_chunk(ids, 1, w, r, 0))
        ctx.same("L=%d position_ids" % L, got_pos,
                 torch.cat([pos, torch.arange(want_pad).repeat(b, 1)], 1))
    # the default group is the SP group set by the launcher
    a = spcoll.sp_slice_and_pad_input(ids, None)
    ctx.same("default group", a[0], pad_chunk(ids, 1, w, r, 0))


def want_keep(L, keep, w, r):
    pad = (w - L % w) % w
    c = (L + pad) // w
    lo = max(0, L - keep) if keep else 0
    return torch.tensor([lo <= r * c + j < L for j in range(c)])


@check()
def axolotl_apply_sequence_parallelism(ctx):
    w, r = ctx.world, ctx.rank
    for L, keep, with_pos in ((8, None, False), (7, 3, True), (7, 0, False),
                              (9, 5, False), (2, 1, True)):
        batch = {"input_ids": ctx.data([2, L], torch.int64),
                 "labels": ctx.data([2, L], torch.int64, salt=1),
                 "attention_mask": torch.ones(2, L, dtype=torch.int64),
                 "inputs_embeds": ctx.data([2, L, 3], salt=2),
                 "num_items_in_batch": 0, "other": torch.zeros(4)}
        if with_pos:
            batch["position_ids"] = (torch.arange(L) % 3).repeat(2, 1)
        if keep is not None:
            batch["logits_to_keep"] = keep
        out, L0, pad = spcoll.apply_sequence_parallelism(batch, r, w, 2)
        tag = "L=%d keep=%s" % (L, keep)
        ctx.true(tag + " lengths", (L0, pad) == (L, (w - L % w) % w), str((L0, pad)))
        for k in ("input_ids", "attention_mask", "inputs_embeds"):
            ctx.same("%s %s" % (tag, k), out[k], pad_chunk(batch[k], 1, w, r, 0))
        ctx.same(tag + " labels", out["labels"], pad_chunk(batch["labels"], 1, w, r, -100))
        pos = batch.get("position_ids", torch.arange(L).repeat(2, 1))
        ctx.same(tag + " position_ids", out["position_ids"], pad_chunk(pos, 1, w, r, 0))
        ctx.same(tag + " untouched", out["other"], batch["other"])
        ctx.true(tag + " num_items_in_batch",
                 int(out["num_items_in_batch"]) == int((out["labels"] != -100).sum()) * 2)
        if keep is not None:
            ctx.same(tag + " logits_to_keep mask", out["logits_to_keep"],
                     want_keep(L, keep, w, r))
        ctx.true(tag + " caller's batch unchanged", batch["input_ids"].shape[1] == L)


@check()
def axolotl_all_gather_with_grad(ctx):
    w, r, g = ctx.world, ctx.rank, ctx.group
    sizes = [3 + j % 2 for j in range(w)]
    x = ctx.mine([2, sizes[r], 3])
    y, gx = fwd_bwd(lambda t: spcoll.AllGatherWithGrad.apply(t, g), x,
                    lambda s: ctx.mine(s, salt=1))
    ctx.same("forward", y, ref.all_gather(x, 1, sizes))
    ctx.same("grad", gx, ctx.mine(list(y.shape), salt=1).narrow(
        1, ref.offsets(sizes)[r], sizes[r]))


class TinyLM(torch.nn.Module):
    """Per-token model: what a rank computes on its slice is exactly the
    slice of the full computation."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(50, 8)
        self.pos = torch.nn.Embedding(64, 8)
        self.out = torch.nn.Linear(8, 11)

    def forward(self, input_ids, labels=None, position_ids=None, logits_to_keep=None):
        if position_ids is None:
            position_ids = torch.arange(input_ids.shape[1]).expand_as(input_ids)
        h = self.emb(input_ids) + self.pos(position_ids)
        if logits_to_keep is not None:
            h = h[:, logits_to_keep]
        return {"logits": self.out(h), "hidden": h}


@check()
def axolotl_context_manager_hooks(ctx):
    """Gathered outputs equal the single-process outputs; parameter
    gradients summed over ranks equal the single-process gradients."""
    w, r, g = ctx.world, ctx.rank, ctx.group
    torch.manual_seed(1234)
    model = TinyLM()
    L = 2 * w + 1                                        # needs padding
    ids = ctx.data([2, L], torch.int64).abs() % 50
    labels = ctx.data([2, L], torch.int64, salt=1).abs() % 11
    full = model(ids)
    loss = F.cross_entropy(full["logits"].reshape(-1, 11), labels.reshape(-1))
    want = torch.autograd.grad(loss, list(model.parameters()))
    with spcoll.SequenceParallelContextManager([model], w, 1, group=g) as cm:
        out = model(input_ids=ids, labels=labels)       # keyword call
        pos_call = model(ids)                            # positional call
        kept = model(input_ids=ids, logits_to_keep=3)
    ctx.true("pad recorded", cm.pad_len == (w - L % w) % w, str(cm.pad_len))
    ctx.close("gathered logits", out["logits"], full["logits"])
    ctx.close("gathered logits (positional call)", pos_call["logits"], full["logits"])
    ctx.close("logits_to_keep=3", kept["logits"], full["logits"][:, -3:])
    loss = F.cross_entropy(out["logits"].reshape(-1, 11), labels.reshape(-1))
    got = torch.autograd.grad(loss, list(model.parameters()))
    for (name, _), a, b in zip(model.named_parameters(), got, want):
        ctx.close("grad %s summed over ranks" % name, ref.all_reduce(a), b, 1e-5, 1e-6)
    after = model(ids)
    ctx.true("hooks removed on exit", after["logits"].shape[1] == L,
             str(tuple(after["logits"].shape)))


@check()
def lightrft_sp_data_processor(ctx):
    w, r, g = ctx.world, ctx.rank, ctx.group
    items = ["r%d-s%d" % (r, i) for i in range(r + 1)]
    with spcoll.SPDataProcessor(g) as p:
        got = p.preprocess(items)
        want = sum(ref.all_gather_object(items), [])
        ctx.true("preprocess list", got == want, repr(got)[:200])
        t = ctx.mine([r + 1, 2])
        ctx.same("preprocess tensor", p.preprocess(t),
                 ref.all_gather(t, 0, [j + 1 for j in range(w)]))
        data = list(range(3 * w))
        ctx.true("postprocess", p.postprocess(data) == data[3 * r:3 * r + 3])
        try:
            p.postprocess(list(range(3 * w + 1)))
            ctx.true("postprocess refuses a length not divisible by sp_size", False)
        except AssertionError:
            pass
