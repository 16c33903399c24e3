"""A small transformer written with plain torch.distributed, as the seeds
write it: Ulysses attention through all_to_all_single (permute, exchange,
permute back), gradients averaged with all_reduce. Three SGD steps on a
process group of backend "spcoll" and on one of backend "gloo" from the
same weights and data: the losses must agree (fp32 sums: tolerance)."""
import os

import torch
import torch.distributed as dist


class _SeqAllToAll(torch.autograd.Function):
    """[s/P, b, h, d] -> [s, b, h/P, d] (scatter heads, gather sequence)
    and back, as DeepSpeed-Ulysses' _SeqAllToAll does it."""

    @staticmethod
    def forward(ctx, x, group, scatter_idx, gather_idx):
        ctx.group, ctx.idx = group, (scatter_idx, gather_idx)
        return _a2a(x, group, scatter_idx, gather_idx)

    @staticmethod
    def backward(ctx, g):
        s, gi = ctx.idx
        return _a2a(g.contiguous(), ctx.group, gi, s), None, None, None


def _a2a(x, group, scatter_idx, gather_idx):
    w = dist.get_world_size(group)
    if scatter_idx == 2:            # [s/P, b, h, d] -> [s, b, h/P, d]
        sp, b, h, d = x.shape
        t = x.reshape(sp, b, w, h // w, d).permute(2, 0, 1, 3, 4).contiguous()
        out = torch.empty_like(t)
        dist.all_to_all_single(out, t, group=group)
        return out.reshape(w * sp, b, h // w, d)
    s, b, hp, d = x.shape           # [s, b, h/P, d] -> [s/P, b, h, d]
    t = x.reshape(w, s // w, b, hp, d).contiguous()
    out = torch.empty_like(t)
    dist.all_to_all_single(out, t, group=group)
    return out.permute(1, 2, 0, 3, 4).reshape(s // w, b, w * hp, d)


class Block(torch.nn.Module):
    def __init__(self, hid, heads):
        super().__init__()
        self.h, self.d = heads, hid // heads
        self.qkv = torch.nn.Linear(hid, 3 * hid)
        self.proj = torch.nn.Linear(hid, hid)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(hid, 2 * hid),
                                       torch.nn.GELU(),
                                       torch.nn.Linear(2 * hid, hid))
        self.n1, self.n2 = torch.nn.LayerNorm(hid), torch.nn.LayerNorm(hid)

    def forward(self, x, group):                     # x: [s/P, b, hid]
        sp, b, hid = x.shape
        q, k, v = self.qkv(self.n1(x)).view(sp, b, 3 * self.h, self.d).chunk(3, 2)
        q, k, v = (_SeqAllToAll.apply(t.contiguous(), group, 2, 0) for t in (q, k, v))
        a = torch.einsum("sbhd,tbhd->bhst", q, k) / self.d ** 0.5
        o = torch.einsum("bhst,tbhd->sbhd", a.softmax(-1), v)
        o = _SeqAllToAll.apply(o.contiguous(), group, 0, 2)
        x = x + self.proj(o.reshape(sp, b, hid))
        return x + self.mlp(self.n2(x))


def train(group, rank, world, steps=3, before_step=None):
    torch.manual_seed(0)
    hid, heads, b, s = 24, 12, 2, 4 * world
    model = torch.nn.Sequential(Block(hid, heads), Block(hid, heads))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(123)
    x = torch.randn(s, b, hid, generator=g)
    y = torch.randn(s, b, hid, generator=g)
    c = s // world
    xs, ys = x[rank * c:(rank + 1) * c], y[rank * c:(rank + 1) * c]
    losses = []
    for step in range(steps):
        if before_step is not None:
            before_step(step)
        opt.zero_grad()
        out = xs
        for blk in model:
            out = blk(out, group)
        loss = (out - ys).square().mean()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad, group=group)
            p.grad /= world
        total = loss.detach().clone()
        dist.all_reduce(total, group=group)
        losses.append(total.item() / world)
        opt.step()
    return losses


def train_vs_gloo(rank, world, sock, store, steps, before_step):
    """One rank of a job on spcolld at sock: the training on backend
    spcoll (the world group), before_step(step) run before each step, then
    the same on gloo. {"spcoll": losses, "gloo": losses}."""
    os.environ["SPCOLL_SOCKET"] = sock
    torch.set_num_threads(1)
    dist.init_process_group("spcoll", init_method="file://" + store,
                            rank=rank, world_size=world)
    gloo = dist.new_group(backend="gloo")
    sp = train(dist.group.WORLD, rank, world, steps, before_step)
    gl = train(gloo, rank, world, steps)
    dist.destroy_process_group()
    return {"spcoll": sp, "gloo": gl}


def losses_match(r, steps):
    """train_vs_gloo's result r: every one of the steps' spcoll losses is
    gloo's (fp32 sums: tolerance)."""
    sp, gl = r["spcoll"], r["gloo"]
    assert len(sp) == steps and all(
        abs(a - b) <= 1e-5 * max(1.0, abs(b)) for a, b in zip(sp, gl)), \
        "losses spcoll %s vs gloo %s" % (sp, gl)
