"""The seeds' own outputs (tests/data/conformance/ws2: the PyTorch
originals run on gloo with 2 ranks, imported by scripts/conformance_import.py)
replayed through the Python wrappers: same inputs, the seeds' forward
outputs and input gradients expected bit for bit. This checks the argument
mapping of each wrapper against the seed it is named after."""
import os
import re
import traceback

import torch

import spcoll
from spcoll import mappings as M

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(os.path.dirname(HERE), "data", "conformance", "ws2")
FILES = ("cases.txt", "batch_cases.txt")


class Case:
    def __init__(self, name):
        self.name, self.op, self.expect, self.dtype = name, None, "ok", "float32"
        self.cp = None
        self.t = {}            # (rank, key) -> (file or None, shape, dtype)
        self.r = {}            # (rank, key) -> value
        self.fwd, self.bwd = [], []

    def tensor(self, rank, key):
        if (rank, key) not in self.t:
            return None
        f, shape, dt = self.t[(rank, key)]
        if f is None:
            return None
        with open(os.path.join(DATA, self.name, f), "rb") as fh:
            raw = bytearray(fh.read())
        dtype = getattr(torch, dt)
        if not raw:
            return torch.empty(shape, dtype=dtype)
        return torch.frombuffer(raw, dtype=dtype).reshape(shape).clone()

    def shape(self, rank, key):
        return self.t[(rank, key)][1]

    def keys(self, rank, prefix):
        return [k[len(prefix):] for (r, k) in self.t if r == rank and k.startswith(prefix)]


def _segments(line):
    out = []
    for part in line.split(";"):
        words = part.split()
        seg = {"op": words[0]}
        for w in words[1:]:
            if "=" in w:
                k, v = w.split("=", 1)
                seg[k] = v
        out.append(seg)
    return out


def load():
    cases = []
    for fname in FILES:
        cur = None
        for line in open(os.path.join(DATA, fname)):
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            if line.startswith("case "):
                cur = Case(line[5:])
                continue
            if line == "end":
                cases.append(cur)
                continue
            k, v = line.split("=", 1)
            if k == "op":
                cur.op = v
            elif k == "expect":
                cur.expect = v
            elif k == "dtype":
                cur.dtype = v
            elif k == "cp":
                cur.cp = [int(x) for x in v.split(",")]
            elif k == "fwd":
                cur.fwd = _segments(v)
            elif k == "bwd":
                cur.bwd = _segments(v)
            elif k.startswith("t."):
                _, rank, key = k.split(".", 2)
                words = v.split()
                shape = [int(s) for s in words[1].split(",")] if words[1] else []
                dt = words[2] if len(words) > 2 else cur.dtype
                cur.t[(int(rank), key)] = (None if words[0] == "-" else words[0],
                                           shape, dt)
            elif k.startswith("r."):
                _, rank, key = k.split(".", 2)
                cur.r[(int(rank), key)] = int(v)
    return cases


def _ints(v):
    return None if v in (None, "-") else [int(s) for s in v.split(",")]


def _mine(v, rank):
    """'1,3/2,1': rank 0's list, then rank 1's."""
    return _ints(v.split("/")[rank] if "/" in v else v)


def _scale(case, default):
    if not case.bwd:
        return default
    s = case.bwd[0].get("scale", default)
    return None if s == "none" else s


def _seqs(case):
    m = re.search(r"seqs([0-9-]+)", case.name)
    return [int(s) for s in m.group(1).split("-")]


def _fn(case, g, rank):
    """The wrapper call the case stands for, as a function of the input."""
    op, a = case.op, (case.fwd[0] if case.fwd else {})
    dim = int(a["dim"]) if "dim" in a else None
    if op == "ms.all_to_all":
        return lambda x: spcoll.all_to_all(x, g, int(a["s"]), int(a["g"]),
                                           int(a["n"]) or None)
    if op == "ms.split_forward_gather_backward":
        return lambda x: spcoll.split_forward_gather_backward(
            x, g, dim, _ints(a["sizes"]), _scale(case, "down"))
    if op == "ms.gather_forward_split_backward":
        return lambda x: spcoll.gather_forward_split_backward(
            x, g, dim, _ints(a["sizes"]), _scale(case, "up"))
    if op == "ms.load_balanced_split_forward_gather_backward":
        return lambda x: spcoll.load_balanced_split_forward_gather_backward(x, g, dim)
    if op == "ms.load_balanced_gather_forward_split_backward":
        return lambda x: spcoll.load_balanced_gather_forward_split_backward(x, g, dim)
    if op == "ms.packed_data_split_forward_gather_backward":
        return lambda x: spcoll.packed_data_split_forward_gather_backward(
            x, g, _ints(a["seqs"]), dim)
    if op == "ms.packed_data_gather_forward_split_backward":
        table = spcoll.cal_split_sizes_multi(_ints(a["seqs"]), g.size)
        return lambda x: spcoll.packed_data_gather_forward_split_backward(x, table, g, dim)
    if op == "ms.split_forward_gather_backward_with_cp":
        return lambda x: spcoll.split_forward_gather_backward_with_cp(x, dim)
    if op == "ms.gather_forward_split_backward_with_cp":
        size = case.shape(rank, "out")[dim]
        return lambda x: spcoll.gather_forward_split_backward_with_cp(x, dim, size)
    if op == "ms.packed_data_split_forward_gather_backward_with_cp":
        return lambda x: spcoll.packed_data_split_forward_gather_backward_with_cp(
            x, dim, _seqs(case))
    if op == "ms.packed_data_gather_forward_split_backward_with_cp":
        return lambda x: spcoll.packed_data_gather_forward_split_backward_with_cp(
            x, dim, _seqs(case))
    if op == "axo.AllGatherWithGrad":
        return lambda x: spcoll.AllGatherWithGrad.apply(x, g)
    if op in ("lrft.gather_forward_split_backward_and_unpad", "axo.gather_outputs_unpad"):
        pad, udim = 0, None
        if len(case.fwd) > 1:
            u = case.fwd[1]
            udim = int(u["dim"])
            pad = case.shape(rank, "mid")[udim] - int(u["seq"])
        if op.startswith("lrft"):
            return lambda x: spcoll.gather_forward_split_backward_and_unpad(
                x, g, dim, pad, udim)
        cm = spcoll.SequenceParallelContextManager([], group=g)
        cm.pad_len = pad
        cm.original_seq_len = (case.shape(rank, "mid")[1] - pad) if pad else 0
        return lambda x: cm._gather({"logits": x})["logits"]
    mg = op[3:] if op.startswith("mg.") else None
    if mg in ("copy_to_tensor_model_parallel_region", "reduce_from_tensor_model_parallel_region",
              "scatter_to_tensor_model_parallel_region",
              "gather_from_tensor_model_parallel_region",
              "scatter_to_sequence_parallel_region",
              "all_gather_last_dim_from_tensor_parallel_region",
              "reduce_scatter_last_dim_to_tensor_parallel_region"):
        return lambda x: getattr(M, mg)(x, g)
    if mg == "gather_from_sequence_parallel_region":
        tpog = "tpogFalse" not in case.name
        return lambda x: M.gather_from_sequence_parallel_region(x, tpog, g, _ints(a["sizes"]))
    if mg == "reduce_scatter_to_sequence_parallel_region":
        return lambda x: M.reduce_scatter_to_sequence_parallel_region(x, g, _ints(a["sizes"]))
    if mg == "all_to_all":
        return lambda x: M.all_to_all(g, x, _mine(a["outs"], rank), _mine(a["ins"], rank))
    if mg == "all_to_all_sp2hp":
        return lambda x: M.all_to_all_sp2hp(x, g)
    if mg == "all_to_all_hp2sp":
        return lambda x: M.all_to_all_hp2sp(x, g)
    return None


def _same(fails, label, got, want):
    if got is None or not isinstance(got, torch.Tensor):
        fails.append("%s: got %r" % (label, got))
    elif got.shape != want.shape or got.dtype != want.dtype:
        fails.append("%s: got %s %s, want %s %s" % (label, got.dtype, tuple(got.shape),
                                                    want.dtype, tuple(want.shape)))
    elif not torch.equal(got, want):
        fails.append("%s: %d of %d elements differ" % (label, int((got != want).sum()),
                                                       got.numel()))


def _batch(case, g, rank, fails):
    if case.op == "axo.apply_sequence_parallelism":
        batch = {k: case.tensor(rank, "in." + k) for k in case.keys(rank, "in.")}
        keep = re.search(r"keep(\d+)", case.name)
        if keep:
            batch["logits_to_keep"] = int(keep.group(1))
        if (rank, "num_items_in_batch") in case.r:
            batch["num_items_in_batch"] = 0
        gas = int(re.search(r"gas(\d+)", case.name).group(1))
        out, L, pad = spcoll.apply_sequence_parallelism(batch, rank, g.size, gas)
        for k in case.keys(rank, "out."):
            _same(fails, "out." + k, out.get(k), case.tensor(rank, "out." + k))
        want = case.r.get((rank, "pad_len"))
        if pad != want:
            fails.append("pad_len %r, want %r" % (pad, want))
        want = case.r.get((rank, "num_items_in_batch"))
        if want is not None and int(out["num_items_in_batch"]) != want:
            fails.append("num_items_in_batch %r, want %r" % (out["num_items_in_batch"], want))
        return True
    if case.op == "lrft.sp_slice_and_pad_input":
        ids, pos = case.tensor(rank, "in.input_ids"), case.tensor(rank, "in.position_ids")
        got_ids, got_pos, pad = spcoll.sp_slice_and_pad_input(ids, pos, g)
        _same(fails, "out.input_ids", got_ids, case.tensor(rank, "out.input_ids"))
        if pos is not None:
            _same(fails, "out.position_ids", got_pos, case.tensor(rank, "out.position_ids"))
        if pad != case.r.get((rank, "pad_size")):
            fails.append("pad_size %r, want %r" % (pad, case.r.get((rank, "pad_size"))))
        return True
    return False


def run_case(case, g, rank):
    """Failures of this rank on the case ([] when it matches the seed)."""
    fails = []
    ps = None
    if case.cp:
        ps = spcoll.initialize_context_parallel(g, ring_size=case.cp[1])
    try:
        if _batch(case, g, rank, fails):
            return fails
        fn = _fn(case, g, rank)
        if fn is None:
            return ["no Python wrapper mapped for seed op %s" % case.op]
        x = case.tensor(rank, "in")
        if case.expect == "einval":
            try:
                fn(x)
                fails.append("expected a ValueError, got none")
            except ValueError:
                pass
            return fails
        gout = case.tensor(rank, "gradout")
        if gout is not None:
            x.requires_grad_(True)
        y = fn(x)
        _same(fails, "forward", y.detach(), case.tensor(rank, "out"))
        if gout is not None:
            y.backward(gout)
            _same(fails, "input grad", x.grad, case.tensor(rank, "gradin"))
    except Exception:
        fails.append("raised:\n" + traceback.format_exc())
    finally:
        if ps is not None:
            for sub in (ps.ring_group, ps.ulysses_group):
                sub.leave()
            spcoll.set_parallel_state()
    return fails


def run_all(rank, world, socket, tag):
    torch.set_num_threads(1)
    g = spcoll.connect(socket).join("conformance-%s" % tag, world, rank)
    return {c.name: run_case(c, g, rank) for c in load()}
