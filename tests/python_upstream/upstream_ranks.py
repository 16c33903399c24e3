"""Rank body of the upstream checks: code people run, installed unchanged
from PyPI, executed forward and backward with backend "spcoll" and with
backend "gloo" on the same inputs; the outputs and input gradients must be
equal (sums: within fp32 tolerance).

Libraries: megatron-core's tensor_parallel.mappings and yunchang's Ulysses
(SeqAllToAll4D, UlyssesAttention) and ring attention (ring_pytorch_attn,
which exchanges K/V with batch_isend_irecv). Megatron allocates outputs
with device=torch.cuda.current_device(); on this GPU-less machine the
harness makes that "cpu" (the one change, outside the library)."""
import os
import traceback

import torch
import torch.distributed as dist

import spcoll  # noqa: F401 (registers "spcoll")

torch.cuda.current_device = lambda: "cpu"


def _data(rank, shape, salt):
    g = torch.Generator().manual_seed(1000 * salt + rank)
    return torch.randn(shape, generator=g)


def _fwd_bwd(fn, x, pg, salt):
    x = x.clone().requires_grad_()
    y = fn(x, pg)
    gy = _data(dist.get_rank() + 77, y.shape, salt)
    (y * gy).sum().backward()
    return y.detach(), x.grad


def megatron_cases(world):
    from megatron.core.tensor_parallel import mappings as m
    r = dist.get_rank()
    uneven = [3 + i for i in range(world)]
    return {
        "copy_to_tp_region": ((4, 6), lambda x, g: m.copy_to_tensor_model_parallel_region(x, g)),
        "reduce_from_tp_region": ((4, 6), lambda x, g: m.reduce_from_tensor_model_parallel_region(x, g)),
        "scatter_to_tp_region": ((4, 2 * world), lambda x, g: m.scatter_to_tensor_model_parallel_region(x, g)),
        "gather_from_tp_region": ((4, 3), lambda x, g: m.gather_from_tensor_model_parallel_region(x, g)),
        "scatter_to_sp_region": ((2 * world, 3), lambda x, g: m.scatter_to_sequence_parallel_region(x, g)),
        "gather_from_sp_region": ((2, 3), lambda x, g: m.gather_from_sequence_parallel_region(x, True, g)),
        "gather_from_sp_region_no_tp_grad": ((2, 3), lambda x, g: m.gather_from_sequence_parallel_region(x, False, g)),
        # gloo cannot gather unequal shapes: these compare with the
        # computation written out (LOCAL_REFS)
        "gather_from_sp_region_uneven": ((uneven[r], 3), lambda x, g: m.gather_from_sequence_parallel_region(
            x, True, g, output_split_sizes=uneven)),
        "gather_from_sp_region_uneven_no_tp_grad": ((uneven[r], 3), lambda x, g: m.gather_from_sequence_parallel_region(
            x, False, g, output_split_sizes=uneven)),
        "reduce_scatter_to_sp_region": ((2 * world, 3), lambda x, g: m.reduce_scatter_to_sequence_parallel_region(x, g)),
        "all_gather_last_dim": ((2, 3), lambda x, g: m.all_gather_last_dim_from_tensor_parallel_region(x, g)),
        "reduce_scatter_last_dim": ((2, 2 * world), lambda x, g: m.reduce_scatter_last_dim_to_tensor_parallel_region(x, g)),
        "all_to_all": ((2 * world, 3), lambda x, g: m.all_to_all(g, x)),
        "all_to_all_sp2hp": ((3, 2 * world), lambda x, g: m.all_to_all_sp2hp(x, g)),
        "all_to_all_hp2sp": ((2 * world, 3), lambda x, g: m.all_to_all_hp2sp(x, g)),
    }


def _local_refs(world, rank):
    """Megatron's uneven sequence-parallel gather written out: forward
    concatenates every rank's rows; backward with
    tensor_parallel_output_grad takes this rank's rows of the sum over
    ranks of the output gradient."""
    uneven = [3 + i for i in range(world)]
    off = sum(uneven[:rank])

    def gather_sum(i):
        y = torch.cat([_data(j, (uneven[j], 3), i) for j in range(world)])
        gy = sum(_data(j + 77, y.shape, i) for j in range(world))
        return y, gy[off:off + uneven[rank]]
    return {"megatron.gather_from_sp_region_uneven": gather_sum}


def yunchang_cases(world):
    """SeqAllToAll4D is yunchang's Ulysses exchange. Its attention layers
    (UlyssesAttention, ring_pytorch_attn_func) call
    aten::_scaled_dot_product_flash_attention, which has no CPU kernel, so
    the ring is checked through its own exchange class RingComm (K/V to the
    next rank with batch_isend_irecv)."""
    from yunchang.comm.all_to_all import SeqAllToAll4D
    from yunchang.ring.utils import RingComm
    b, s, h, d = 2, 4, 2 * world, 8     # s: this rank's share

    def ring(x, g):
        comm = RingComm(g)
        k, v = x.chunk(2, dim=-1)
        outs = []
        for step in range(comm.world_size - 1):
            nk = comm.send_recv(k.contiguous())
            nv = comm.send_recv(v.contiguous())
            comm.commit()
            comm.wait()
            k, v = nk, nv
            outs.append(torch.cat([k, v], -1))
        return torch.stack(outs)
    return {
        "SeqAllToAll4D_seq_to_head": ((b, s, h, d), lambda x, g: SeqAllToAll4D.apply(g, x, 2, 1, False)),
        "SeqAllToAll4D_head_to_seq": ((b, s * world, 2, d), lambda x, g: SeqAllToAll4D.apply(g, x, 1, 2, False)),
        "RingComm_kv_ring": ((b, s, 2, 2 * d), lambda x, g: _no_grad(ring, x, g)),
    }


def ringmaster_cases(world):
    """axolotl-ringmaster: its Ulysses exchange (seq_all_to_all, over
    dist.all_to_all on spcoll, an all_gather emulation on gloo) and its
    P2P ring attention (ring_p2p_attention: K/V and their gradients rotate
    with batch_isend_irecv; the explicit-softmax path it takes on CPU)."""
    from ringmaster.comm import seq_all_to_all
    from ringmaster.ring.p2p_attn import ring_p2p_attention
    b, s, h, d = 2, 3, 2 * world, 4

    def ring(causal):
        def f(x, g):
            q, k, v = x.chunk(3, dim=-1)
            return ring_p2p_attention(q, k, v, group=g, causal=causal,
                                      scaling=None)
        return f
    return {
        "seq_all_to_all": ((b, s, h, d), lambda x, g: seq_all_to_all(x, 2, 1, g)),
        "ring_p2p_attention": ((b, 2, s, 3 * d), ring(False)),
        "ring_p2p_attention_causal": ((b, 2, s, 3 * d), ring(True)),
    }


def _no_grad(fn, x, g):
    # RingComm moves tensors without autograd: the output is made to depend
    # on x so that backward runs (gradient: x's own contribution, zero)
    return fn(x.detach(), g) + 0 * x.sum()


def deepspeed_cases(world):
    """DeepSpeed-Ulysses: deepspeed.sequence.layer.DistributedAttention with
    a plain softmax attention as its local attention; layout [s/P, b, h, d]
    (scatter heads, gather sequence)."""
    import deepspeed.comm
    from deepspeed.sequence.layer import DistributedAttention
    if deepspeed.comm.cdb is None:
        deepspeed.comm.init_distributed(dist_backend="spcoll",
                                        auto_mpi_discovery=False,
                                        verbose=False)
    s, b, h, d = 3, 2, 2 * world, 4

    class Local(torch.nn.Module):
        def forward(self, q, k, v, *args, **kwargs):   # [s, b, h, d]
            a = torch.einsum("sbhd,tbhd->bhst", q, k) / d ** 0.5
            return torch.einsum("bhst,tbhd->sbhd", a.softmax(-1), v)

    def attn(x, g):
        q, k, v = x.chunk(3, dim=-1)
        return DistributedAttention(Local(), g, scatter_idx=2,
                                    gather_idx=0)(q, k, v, 1)
    return {"DistributedAttention": ((s, b, h, 3 * d), attn)}


def run(rank, world, socket, store):
    os.environ["SPCOLL_SOCKET"] = socket
    torch.set_num_threads(1)
    dist.init_process_group("spcoll", init_method="file://" + store,
                            rank=rank, world_size=world)
    gloo = dist.new_group(backend="gloo")
    sp = dist.new_group(list(range(world)))     # a spcoll sub-group too
    out = {}
    cases = {}
    refs = _local_refs(world, rank)
    for lib, make in (("megatron", megatron_cases), ("yunchang", yunchang_cases),
                      ("deepspeed", deepspeed_cases),
                      ("ringmaster", ringmaster_cases)):
        try:
            for k, v in make(world).items():
                cases["%s.%s" % (lib, k)] = v
        except Exception:
            out[lib] = ["import failed:\n" + traceback.format_exc()]
    for i, (name, (shape, fn)) in enumerate(cases.items()):
        bad = []
        try:
            x = _data(rank, shape, i)
            if name in refs:
                yg, gg = refs[name](i)
            elif name.endswith("_uneven_no_tp_grad"):
                yg = gg = None      # recorded below: what megatron does
            else:
                yg, gg = _fwd_bwd(fn, x, gloo, i)
            for label, pg in (("world", dist.group.WORLD), ("sub-group", sp)):
                if yg is None:
                    try:
                        _fwd_bwd(fn, x, pg, i)
                        bad.append("%s: ran (megatron's backward splits "
                                   "evenly, expected to fail)" % label)
                    except Exception as e:
                        out.setdefault("notes", []).append(
                            "%s %s: %s: %s" % (name, label, type(e).__name__, str(e)[:200]))
                    continue
                ys, gs = _fwd_bwd(fn, x, pg, i)
                for what, a, b in (("output", ys, yg), ("input grad", gs, gg)):
                    if a.shape != b.shape or not torch.allclose(a, b, rtol=1e-5, atol=1e-5):
                        bad.append("%s %s differs from gloo: %s vs %s" % (
                            label, what, tuple(a.shape), tuple(b.shape)))
        except Exception:
            bad.append("raised:\n" + traceback.format_exc())
        out[name] = bad
    dist.destroy_process_group()
    return out
