"""A tiny transformer block with Ulysses attention, trained 3 steps on 4
ranks (sequence split 4 ways, heads exchanged by spcoll.all_to_all,
gradients summed with spcoll's all_reduce), against the same model trained
in one process on the whole sequence: the same losses and gradients at fp32
tolerance."""
import math

import torch
import torch.nn.functional as F

import spcoll
from spcoll import ops
from registry import check

VOCAB, HID, HEADS, FF = 37, 16, 4, 32


def attention(q, k, v):
    """Causal softmax attention; q, k, v [b, s, h, d] over the full s."""
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    s = q.shape[2]
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    mask = torch.ones(s, s, dtype=torch.bool).triu(1)
    p = scores.masked_fill(mask, float("-inf")).softmax(-1)
    return (p @ v).transpose(1, 2)


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, HID)
        self.pos = torch.nn.Embedding(64, HID)
        self.ln1 = torch.nn.LayerNorm(HID)
        self.qkv = torch.nn.Linear(HID, 3 * HID)
        self.proj = torch.nn.Linear(HID, HID)
        self.ln2 = torch.nn.LayerNorm(HID)
        self.fc1 = torch.nn.Linear(HID, FF)
        self.fc2 = torch.nn.Linear(FF, HID)
        self.head = torch.nn.Linear(HID, VOCAB)

    def forward(self, ids, positions, attn):
        x = self.emb(ids) + self.pos(positions)
        b, s, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, HEADS, HID // HEADS).unbind(2)
        x = x + self.proj(attn(q, k, v).reshape(b, s, HID))
        x = x + self.fc2(F.gelu(self.fc1(self.ln2(x))))
        return self.head(x)


def train(model, steps, batches, forward_loss, reduce_grads):
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    losses, grads = [], []
    for step in range(steps):
        opt.zero_grad()
        loss = forward_loss(model, batches[step])
        loss.backward()
        total = reduce_grads(model, loss)
        losses.append(total)
        grads.append([p.grad.clone() for p in model.parameters()])
        opt.step()
    return losses, grads


@check(4)
def ulysses_block_training(ctx):
    w, r, g = ctx.world, ctx.rank, ctx.group
    B, S = 2, 12
    batches = [(ctx.data([B, S + 1], torch.int64, salt=s).abs() % VOCAB) for s in range(3)]

    def whole(model, batch):
        ids, tgt = batch[:, :-1], batch[:, 1:]
        logits = model(ids, torch.arange(S).expand(B, S), attention)
        return F.cross_entropy(logits.reshape(-1, VOCAB), tgt.reshape(-1))

    c = S // w

    def sharded(model, batch):
        ids, tgt = batch[:, r * c:(r + 1) * c], batch[:, 1 + r * c:1 + (r + 1) * c]
        pos = torch.arange(r * c, (r + 1) * c).expand(B, c)
        logits = model(ids, pos,
                       lambda q, k, v: spcoll.ulysses_attention(q, k, v, attention, g))
        # this rank's share of the mean over all B * S tokens
        return F.cross_entropy(logits.reshape(-1, VOCAB), tgt.reshape(-1),
                               reduction="sum") / (B * S)

    def summed(model, loss):
        for p in model.parameters():
            p.grad.copy_(ops.all_reduce(p.grad, g))
        return ops.all_reduce(loss.detach(), g).item()

    torch.manual_seed(7)
    ref_model = Block()
    torch.manual_seed(7)
    sp_model = Block()
    want_l, want_g = train(ref_model, 3, batches, whole, lambda m, l: l.item())
    got_l, got_g = train(sp_model, 3, batches, sharded, summed)
    for step in range(3):
        ctx.true("step %d loss" % step,
                 math.isclose(got_l[step], want_l[step], rel_tol=1e-5, abs_tol=1e-6),
                 "%r vs %r" % (got_l[step], want_l[step]))
        for (name, _), a, b in zip(sp_model.named_parameters(), got_g[step], want_g[step]):
            ctx.close("step %d grad %s" % (step, name), a, b, rtol=1e-4, atol=1e-6)
    ctx.true("the loss moved", want_l[2] < want_l[0], str(want_l))
