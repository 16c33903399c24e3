#!/usr/bin/env python3
"""Import the seed conformance vectors into the repository.

Reads the manifest of golden vectors (made by running the seed libraries'
own code), copies the tensor files each case uses to
tests/data/conformance/ws<W>/<case>/ and writes two case files there, read
by the runner in tests/integ/conformance_cases.c:
  cases.txt        the collectives (tests/integ/test_conformance.c);
  batch_cases.txt  batch preparation around them: padding, slicing, position
                   ids, logits_to_keep masks, unpadding
                   (tests/integ/test_conformance_batch.c).
The tests never read the source folder.

Case file format (one record per case, "#" lines are comments):

    case NAME
    op=SEED_OP                 informational
    world=W
    dtype=float32|int64        of every tensor that names no dtype
    cp=U,R                     only for *_with_cp: make ring/uly subgroups
    expect=ok|einval           einval: the forward must fail with SPC_EINVAL
    from.KEY=TEXT              informational: where an expectation came from
    t.RANK.KEY=FILE SHAPE [DTYPE]
                               FILE relative to the case folder, "-" for a
                               scratch tensor; SHAPE "d0,d1,..."; DTYPE
                               float32, int64 or bool (one byte)
    r.RANK.NAME=VALUE          an expected scalar result of fwd
    fwd=STEP;STEP...           run in order
    bwd=STEP;STEP...           absent: forward only
    end
    skip NAME REASON

A tensor KEY is ROLE or ROLE.NAME (the seeds' multi-tensor ops name their
tensors: out.labels). Roles: in and gradout are loaded; out and gradin are
the expected results of fwd and bwd; any other role (mid, midb) is scratch.
STEP is "OP GROUP SRC>DST key=value...", GROUP one of world/ring/uly (local
steps use world for the rank and the size); SRC or DST is a tensor KEY, may
be empty, and DST "#NAME" is the result NAME. A value is "-" (NULL), an
integer or a comma list; "a/b/..." gives one value per global rank.

Usage: scripts/conformance_import.py [--src DIR] [--dst DIR]
"""
import argparse
import json
import os
import shutil
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_SRC = "/work/shared/conformance/ws2"
DEFAULT_DST = os.path.join(HERE, "..", "tests", "data", "conformance", "ws2")

# Ops not run, with the reason (none at present).
SKIP = {}

ELEM = {"float32": 4, "int64": 8, "bool": 1}


def rule(n, w):
    """The seeds' cal_split_sizes: the remainder goes to the first ranks."""
    return [n // w + (1 if i < n % w else 0) for i in range(w)]


def lst(v):
    return "-" if v is None else ",".join(str(int(x)) for x in v)


def per_rank(vals):
    """One value per global rank; collapsed when they are all the same."""
    return vals[0] if all(v == vals[0] for v in vals) else "/".join(vals)


def scale_name(s):
    return {"up": "up", "down": "down", None: "none"}[s]


def step(op, group, src, dst, **kw):
    args = " ".join("%s=%s" % (k, v) for k, v in kw.items())
    return ("%s %s %s>%s %s" % (op, group, src, dst, args)).strip()


def norm_dim(d, ndim):
    return d + ndim if d < 0 else d


class Case:
    """One case being converted: its files, shapes and programs."""

    def __init__(self, c, src):
        self.c = c
        self.p = c["params"]
        self.w = c["world_size"]
        self.src = os.path.join(src, c["name"])
        self.tensors = {}  # (rank, role) -> manifest tensor
        self.named = {}    # (rank, role, name) -> manifest tensor
        for r in c["ranks"]:
            for t in r["tensors"]:
                if t["name"] == "main":
                    self.tensors[(r["rank"], t["role"])] = t
                else:
                    self.named[(r["rank"], t["role"], t["name"])] = t
        self.results = [r["results"] for r in c["ranks"]]
        self.lines = []        # t.* and r.* lines
        self.copies = []       # file names to copy
        self.derived = {}      # file name -> bytes computed here
        self.fwd, self.bwd = [], []
        self.expect = "ok"
        self.cp = None
        self.notes = {}

    def has(self, role):
        return all((r, role) in self.tensors for r in range(self.w))

    def shape(self, rank, role):
        return self.tensors[(rank, role)]["shape"]

    def use(self, role, as_role=None):
        """Reference the manifest's file of `role` for every rank."""
        for r in range(self.w):
            t = self.tensors[(r, role)]
            self.copies.append(t["file"])
            self.lines.append("t.%d.%s=%s %s" % (r, as_role or role, t["file"],
                                                 lst(t["shape"])))

    def scratch(self, role, shapes, dtype=None):
        for r in range(self.w):
            self.lines.append("t.%d.%s=- %s%s" % (r, role, lst(shapes[r]),
                                                  self.dt(dtype)))

    def dt(self, dtype):
        """The DTYPE field of a t.* line: only where the case's differs."""
        return "" if dtype in (None, self.c["dtype"]) else " " + dtype

    def names(self, role):
        """Names of the named tensors of role, in the manifest's order (the
        same on every rank)."""
        return [n for (r, ro, n) in self.named if r == 0 and ro == role]

    def use_named(self, role, name, as_role=None, ranks=None):
        """Reference the named tensor role.name of every rank (or of
        `ranks`) as as_role.name."""
        for r in range(self.w) if ranks is None else ranks:
            t = self.named[(r, role, name)]
            self.copies.append(t["file"])
            self.lines.append("t.%d.%s.%s=%s %s%s" % (
                r, as_role or role, name, t["file"], lst(t["shape"]),
                self.dt(t["dtype"])))

    def derive(self, rank, key, data, shape, dtype, note):
        """An expectation computed here, where the seed gives none."""
        name = "r%d.importer_%s.bin" % (rank, key)
        self.derived[name] = data
        self.lines.append("t.%d.%s=%s %s%s" % (rank, key, name, lst(shape),
                                                self.dt(dtype)))
        self.notes[key] = "importer: " + note

    def result(self, rank, name, value):
        self.lines.append("r.%d.%s=%d" % (rank, name, value))

    def read(self, rank, role, name=None):
        t = (self.tensors[(rank, role)] if name is None
             else self.named[(rank, role, name)])
        with open(os.path.join(self.src, t["file"]), "rb") as f:
            return f.read()

    def expected(self):
        """in/gradout as inputs; out/gradin from the reference when the seed
        is wrong (ref_*), else from the seed."""
        self.use("in")
        for role in ("out", "gradin"):
            if self.has("ref_" + role):
                self.use("ref_" + role, role)
                self.notes[role] = "ref_" + role + " (seed result differs)"
            elif self.has(role):
                self.use(role)
        if self.has("gradout"):
            self.use("gradout")


def slice_rows(data, shape, elem, start, count):
    """Rows [start, start+count) along dim 0 of a C-order tensor."""
    row = elem
    for d in shape[1:]:
        row *= d
    return data[start * row:(start + count) * row]


# ---- per-op programs --------------------------------------------------
# Each returns nothing and fills case.fwd / case.bwd (lists of steps). The
# mapping follows the seed functions; see test_conformance.c for the ops.

def ms_all_to_all(k):
    p = k.p
    s, g = p["scatter_dim"], p["gather_dim"]
    k.fwd = [step("a2a", "world", "in", "out", s=s, g=g,
                  n=p["gather_size"] or 0)]
    k.bwd = [step("a2a_bwd", "world", "gradout", "gradin", s=s, g=g,
                  n=p["scatter_size"])]


def ms_split(k):
    p = k.p
    d, sz = p["dim"], lst(p["split_sizes"])
    k.fwd = [step("split", "world", "in", "out", dim=d, sizes=sz)]
    k.bwd = [step("split_bwd", "world", "gradout", "gradin", dim=d, sizes=sz,
                  scale=scale_name(p["grad_scale"]))]


def local_sizes(k, d):
    """Per-rank input sizes along d, or None when all are equal."""
    shapes = k.p.get("local_in_shapes") or [k.shape(r, "in")
                                            for r in range(k.w)]
    sizes = [s[norm_dim(d, len(s))] for s in shapes]
    return None if len(set(sizes)) == 1 else sizes


def ms_gather(k):
    p = k.p
    d = p["dim"]
    sz = lst(p["gather_sizes"] if p["gather_sizes"] is not None
             else local_sizes(k, d))
    k.fwd = [step("all_gather", "world", "in", "out", dim=d, sizes=sz)]
    k.bwd = [step("ag_bwd_own", "world", "gradout", "gradin", dim=d,
                  sizes=sz, scale=scale_name(p["grad_scale"]))]


def ms_zz(name):
    def f(k):
        d = k.p["dim"]
        k.fwd = [step(name, "world", "in", "out", dim=d)]
        k.bwd = [step(name + "_bwd", "world", "gradout", "gradin", dim=d)]
        if k.c["status"] == "forward_error":
            # L % (2 cp) != 0: the seed's view() fails, we must say EINVAL.
            # The output is what a caller would allocate: L // cp.
            k.expect = "einval"
            sh = k.shape(0, "in")[:]
            sh[norm_dim(d, len(sh))] //= k.w
            k.scratch("out", [sh] * k.w)
            k.bwd = []
    return f


def ms_packed(name):
    def f(k):
        d, seqs = k.p["dim"], lst(k.p["seq_lens"])
        k.fwd = [step(name, "world", "in", "out", dim=d, seqs=seqs)]
        k.bwd = [step(name + "_bwd", "world", "gradout", "gradin", dim=d,
                      seqs=seqs)]
    return f


def cp_layout(k):
    """(U, R, ring rank and Ulysses rank of each global rank)."""
    u, r = k.p["ulysses"], k.p["ring"]
    k.cp = (u, r)
    return u, r, [g % r for g in range(k.w)], [g // r for g in range(k.w)]


def with_shapes(k, base_role, d, lens):
    out = []
    for g in range(k.w):
        sh = list(k.shape(g, base_role))
        sh[norm_dim(d, len(sh))] = lens[g]
        out.append(sh)
    return out


def stages(k, fwd, bwd, mid_shapes):
    """Chain the enabled stages (the seeds skip a stage whose group has one
    rank: is_ring_enable / is_ulysses_enable) through mid/midb."""
    if len(fwd) == 2:
        k.scratch("mid", mid_shapes)
        k.scratch("midb", mid_shapes)
        k.fwd = [fwd[0] % ("in", "mid"), fwd[1] % ("mid", "out")]
        k.bwd = [bwd[0] % ("gradout", "midb"), bwd[1] % ("midb", "gradin")]
    else:
        k.fwd = [fwd[0] % ("in", "out")]
        k.bwd = [bwd[0] % ("gradout", "gradin")]


def ms_cp_split(k):
    u, r, rr, ur = cp_layout(k)
    d = k.p["dim"]
    L = k.shape(0, "in")[norm_dim(d, len(k.shape(0, "in")))]
    fwd, bwd = [], []
    if r > 1:
        fwd.append("zz_split ring %%s>%%s dim=%d" % d)
        bwd.insert(0, "zz_split_bwd ring %%s>%%s dim=%d" % d)
    if u > 1:  # the rule on the local (ring) length: NULL sizes
        fwd.append("split uly %%s>%%s dim=%d sizes=-" % d)
        bwd.insert(0, "split_bwd uly %%s>%%s dim=%d sizes=- scale=down" % d)
    stages(k, fwd, bwd, with_shapes(k, "in", d, [L // r] * k.w))
    if k.c["status"] == "forward_error":
        k.expect = "einval"
        k.scratch("out", with_shapes(k, "in", d, [L // k.w] * k.w))
        k.bwd = []


def ms_cp_gather(k):
    u, r, rr, ur = cp_layout(k)
    d, L = k.p["dim"], k.p["gather_size"]
    sizes = lst(rule(L // r, u))
    fwd, bwd = [], []
    if u > 1:
        fwd.append("all_gather uly %%s>%%s dim=%d sizes=%s" % (d, sizes))
        bwd.insert(0, "ag_bwd_own uly %%s>%%s dim=%d sizes=%s scale=up"
                   % (d, sizes))
    if r > 1:
        fwd.append("zz_gather ring %%s>%%s dim=%d" % d)
        bwd.insert(0, "zz_gather_bwd ring %%s>%%s dim=%d" % d)
    stages(k, fwd, bwd, with_shapes(k, "in", d, [L // r] * k.w))


def ring_totals(seq_lens, r):
    """Each ring rank's packed length: its rule piece of every sequence."""
    return [sum(rule(n, r)[i] for n in seq_lens) for i in range(r)]


def ms_cp_pksplit(k):
    u, r, rr, ur = cp_layout(k)
    d, seqs = k.p["dim"], k.p["seq_lens"]
    tot = ring_totals(seqs, r)
    fwd, bwd = [], []
    if r > 1:
        fwd.append("pk_split ring %%s>%%s dim=%d seqs=%s" % (d, lst(seqs)))
        bwd.insert(0, "pk_split_bwd ring %%s>%%s dim=%d seqs=%s"
                   % (d, lst(seqs)))
    if u > 1:
        fwd.append("split uly %%s>%%s dim=%d sizes=-" % d)
        bwd.insert(0, "split_bwd uly %%s>%%s dim=%d sizes=- scale=down" % d)
    stages(k, fwd, bwd, with_shapes(k, "in", d, [tot[x] for x in rr]))


def ms_cp_pkgather(k):
    u, r, rr, ur = cp_layout(k)
    d, seqs = k.p["dim"], k.p["seq_lens"]
    tot = ring_totals(seqs, r)
    # Ulysses sizes depend on the ring rank: one list per global rank.
    sizes = per_rank([lst(rule(tot[x], u)) for x in rr])
    fwd, bwd = [], []
    if u > 1:
        fwd.append("all_gather uly %%s>%%s dim=%d sizes=%s" % (d, sizes))
        bwd.insert(0, "ag_bwd_own uly %%s>%%s dim=%d sizes=%s scale=up"
                   % (d, sizes))
    if r > 1:
        fwd.append("pk_gather ring %%s>%%s dim=%d seqs=%s" % (d, lst(seqs)))
        bwd.insert(0, "pk_gather_bwd ring %%s>%%s dim=%d seqs=%s"
                   % (d, lst(seqs)))
    stages(k, fwd, bwd, with_shapes(k, "in", d, [tot[x] for x in rr]))


def axo_agwg(k):
    d = k.p["dim"]
    sizes = [k.shape(g, "in")[norm_dim(d, len(k.shape(g, "in")))]
             for g in range(k.w)]
    k.fwd = [step("all_gather", "world", "in", "out", dim=d,
                  sizes=lst(sizes))]
    k.bwd = [step("ag_bwd_own", "world", "gradout", "gradin", dim=d,
                  sizes=lst(sizes), scale="none")]


def simple(fwd_op, bwd_op, dim=None, fwd_kw=None, bwd_kw=None):
    def f(k):
        kw = {} if dim is None else {"dim": dim}
        k.fwd = [step(fwd_op, "world", "in", "out",
                      **dict(kw, **(fwd_kw or {})))]
        k.bwd = [step(bwd_op, "world", "gradout", "gradin",
                      **dict(kw, **(bwd_kw or {})))]
    return f


def mg_scatter_sp(k):
    simple("split", "split_bwd", 0, {"sizes": "-"},
           {"sizes": "-", "scale": "none"})(k)
    if k.c["status"] == "forward_error":
        # Megatron asserts n % w == 0; our split follows the rule. There is
        # no seed output, so the expectation is the rule split of the input.
        sh = k.shape(0, "in")
        sizes = rule(sh[0], k.w)
        data = k.read(0, "in")
        for g in range(k.w):
            name = "r%d.rule_out.bin" % g
            k.derived[name] = slice_rows(data, sh, ELEM[k.c["dtype"]],
                                         sum(sizes[:g]), sizes[g])
            k.lines.append("t.%d.out=%s %s" % (g, name,
                                               lst([sizes[g]] + sh[1:])))
        k.notes["out"] = "importer: rule split of in (Megatron asserts)"
        k.bwd = []  # no gradout was recorded


def mg_gather_sp(k):
    p = k.p
    sz = lst(p.get("output_split_sizes"))
    bwd = "ag_bwd_sum" if p["tensor_parallel_output_grad"] else "ag_bwd_own"
    bkw = {"sizes": sz}
    if bwd == "ag_bwd_own":
        bkw["scale"] = "none"
    simple("all_gather", bwd, 0, {"sizes": sz}, bkw)(k)
    if k.c["status"] == "backward_error":
        # Megatron asserts output_split_sizes is None here; the right grad
        # is rank r's own rows [off_r, off_r + s_r) of its own gradout.
        sizes = p["output_split_sizes"]
        for g in range(k.w):
            sh = k.shape(g, "gradout")
            name = "r%d.own_gradin.bin" % g
            k.derived[name] = slice_rows(k.read(g, "gradout"), sh,
                                         ELEM[k.c["dtype"]],
                                         sum(sizes[:g]), sizes[g])
            k.lines.append("t.%d.gradin=%s %s" % (g, name,
                                                  lst([sizes[g]] + sh[1:])))
        k.notes["gradin"] = "importer: own segment of gradout (Megatron asserts)"


def mg_reduce_scatter_sp(k):
    sz = lst(k.p.get("input_split_sizes"))
    simple("reduce_scatter", "all_gather", 0, {"sizes": sz}, {"sizes": sz})(k)


def mg_all_to_all(k):
    p = k.p
    ins = p.get("input_split_sizes_by_rank")
    outs = p.get("output_split_sizes_by_rank")
    if ins is None:  # Megatron: equal splits of the rows
        ins = [[k.shape(g, "in")[0] // k.w] * k.w for g in range(k.w)]
        outs = [[k.shape(g, "out")[0] // k.w] * k.w for g in range(k.w)]
    i = per_rank([lst(x) for x in ins])
    o = per_rank([lst(x) for x in outs])
    simple("a2av", "a2av", None, {"ins": i, "outs": o},
           {"ins": o, "outs": i})(k)


# ---- batch preparation (batch_cases.txt) -------------------------------
# Local steps around the collectives: see test_conformance_batch.c.

def axo_sp(k):
    """apply_sequence_parallelism: every [b, L, ...] tensor of the replicated
    batch is right-padded along dim 1 to a multiple of w (labels with -100,
    the rest with 0) and rank r keeps chunk r (spc_sp_slice). Missing
    position_ids are arange(L) per row, padded and sliced the same way. An
    int logits_to_keep becomes the rank's mask (spc_sp_keep_mask), compared
    with ideal_out where the seed's quirk differs from it.
    num_items_in_batch is the local label count times GAS. The seed's
    original_seq_len result is L itself: nothing of ours computes it."""
    p = k.p
    L, keep = p["seq_len"], p["logits_to_keep"]
    made = []
    for name in k.names("in"):
        sh = k.named[(0, "in", name)]["shape"]
        if len(sh) < 2 or sh[1] != L:
            raise SystemExit("%s: in.%s is not [b, L, ...]"
                             % (k.c["name"], name))
        k.use_named("in", name)
        k.fwd.append(step("sp_slice", "world", "in." + name, "out." + name,
                          dim=1, fill=-100 if name == "labels" else 0))
        made.append(name)
    if "position_ids" not in made:
        bsz = k.named[(0, "in", "input_ids")]["shape"][0]
        k.scratch("mid.position_ids", [[bsz, L]] * k.w, "int64")
        k.fwd += [step("arange", "world", "", "mid.position_ids"),
                  step("sp_slice", "world", "mid.position_ids",
                       "out.position_ids", dim=1, fill=0)]
        made.append("position_ids")
    if keep is not None:
        k.fwd.append(step("keep_mask", "world", "", "out.logits_to_keep",
                          seq=L, keep=keep))
        made.append("logits_to_keep")
    if sorted(made) != sorted(k.names("out")):
        raise SystemExit("%s: outputs %s, the seed has %s"
                         % (k.c["name"], made, k.names("out")))
    for name in made:
        ideal = [r for r in range(k.w) if (r, "ideal_out", name) in k.named]
        for r in range(k.w):
            k.use_named("ideal_out" if r in ideal else "out", name, "out",
                        [r])
        if ideal:
            k.notes["out." + name] = ("ideal_out on rank(s) %s (the seed's "
                                      "mask quirk)" % lst(ideal))
    k.fwd.append(step("pad_len", "world", "", "#pad_len", seq=L))
    if "num_items_in_batch" in p["batch_keys"]:
        k.fwd.append(step("count_ne", "world", "out.labels",
                          "#num_items_in_batch", value=-100,
                          times=p["gradient_accumulation_steps"]))
    for r in range(k.w):
        for name in ("pad_len", "num_items_in_batch"):
            if name in k.results[r]:
                k.result(r, name, k.results[r][name])


def i64(data):
    return list(struct.unpack("<%dq" % (len(data) // 8), data))


def lrft_slice(k):
    """sp_slice_and_pad_input: input_ids padded with 0 along the last dim,
    rank r keeps chunk r; position_ids padded with 0, 1, ... (the pad
    positions of spc_sp_positions) and not sliced."""
    L, w = k.p["seq_len"], k.w
    has_pos = (0, "in", "position_ids") in k.named
    k.use_named("in", "input_ids")
    k.fwd = [step("sp_slice", "world", "in.input_ids", "out.input_ids",
                  dim=-1, fill=0)]
    if has_pos:
        k.use_named("in", "position_ids")
        k.fwd.append(step("sp_positions", "world", "in.position_ids",
                          "out.position_ids"))
    k.fwd.append(step("pad_len", "world", "", "#pad_size", seq=L))
    if k.c["status"] == "ok":
        k.use_named("out", "input_ids")
        if has_pos:
            k.use_named("out", "position_ids")
        for r in range(w):
            k.result(r, "pad_size", k.results[r]["pad_size"])
        return
    # The seed asserts bsz == 1 when position_ids are given; every row is
    # padded the same way, so the right result is computed here.
    pad = (w - L % w) % w
    c = (L + pad) // w
    bsz = k.named[(0, "in", "input_ids")]["shape"][0]
    for r in range(w):
        ids, out, pos = i64(k.read(r, "in", "input_ids")), [], []
        for b in range(bsz):
            row = ids[b * L:(b + 1) * L] + [0] * pad
            out += row[r * c:(r + 1) * c]
        if has_pos:
            given = i64(k.read(r, "in", "position_ids"))
            for b in range(bsz):
                pos += given[b * L:(b + 1) * L] + list(range(pad))
        note = "the seed asserts bsz == 1 with position_ids; rows padded alike"
        k.derive(r, "out.input_ids", struct.pack("<%dq" % len(out), *out),
                 [bsz, c], "int64", note)
        if has_pos:
            k.derive(r, "out.position_ids",
                     struct.pack("<%dq" % len(pos), *pos), [bsz, L + pad],
                     "int64", note)
        k.result(r, "pad_size", pad)
        k.notes["pad_size"] = "importer: (w - L % w) % w"


def gather_unpad(k, d, ud, pad):
    """Equal all-gather along d, then drop the last `pad` positions along
    ud (spc_sp_unpad). Backward: the cut part is zero-filled, then each
    rank takes its own piece along d, unscaled."""
    k.expected()
    if pad == 0:
        k.fwd = [step("all_gather", "world", "in", "out", dim=d, sizes="-")]
        k.bwd = [step("ag_bwd_own", "world", "gradout", "gradin", dim=d,
                      sizes="-", scale="none")]
        return
    full = list(k.shape(0, "in"))
    d, ud = norm_dim(d, len(full)), norm_dim(ud, len(full))
    full[d] *= k.w
    want = full[:]
    want[ud] -= pad
    if any(k.shape(r, "out") != want for r in range(k.w)):
        raise SystemExit("%s: out is not %s" % (k.c["name"], want))
    k.scratch("mid", [full] * k.w)
    if k.has("gradout"):
        k.scratch("midb", [full] * k.w)
    k.fwd = [step("all_gather", "world", "in", "mid", dim=d, sizes="-"),
             step("sp_unpad", "world", "mid", "out", dim=ud, seq=want[ud])]
    k.bwd = [step("zero_pad", "world", "gradout", "midb", dim=ud),
             step("ag_bwd_own", "world", "midb", "gradin", dim=d, sizes="-",
                  scale="none")]


def axo_unpad(k):
    gather_unpad(k, 1, 1, k.p["pad_len"])


def lrft_unpad(k):
    d, ud = k.p["dim"], k.p["unpad_dim"]
    gather_unpad(k, d, d if ud is None else ud, k.p["padding_size"])


BATCH_PROGRAMS = {
    "axo.apply_sequence_parallelism": axo_sp,
    "lrft.sp_slice_and_pad_input": lrft_slice,
    "axo.gather_outputs_unpad": axo_unpad,
    "lrft.gather_forward_split_backward_and_unpad": lrft_unpad,
}

PROGRAMS = {
    "ms.all_to_all": ms_all_to_all,
    "ms.split_forward_gather_backward": ms_split,
    "ms.gather_forward_split_backward": ms_gather,
    "ms.load_balanced_split_forward_gather_backward": ms_zz("zz_split"),
    "ms.load_balanced_gather_forward_split_backward": ms_zz("zz_gather"),
    "ms.packed_data_split_forward_gather_backward": ms_packed("pk_split"),
    "ms.packed_data_gather_forward_split_backward": ms_packed("pk_gather"),
    "ms.split_forward_gather_backward_with_cp": ms_cp_split,
    "ms.gather_forward_split_backward_with_cp": ms_cp_gather,
    "ms.packed_data_split_forward_gather_backward_with_cp": ms_cp_pksplit,
    "ms.packed_data_gather_forward_split_backward_with_cp": ms_cp_pkgather,
    "axo.AllGatherWithGrad": axo_agwg,
    "mg.copy_to_tensor_model_parallel_region": simple("copy", "all_reduce"),
    "mg.reduce_from_tensor_model_parallel_region": simple("all_reduce", "copy"),
    "mg.scatter_to_tensor_model_parallel_region": simple(
        "split", "split_bwd", -1, {"sizes": "-"},
        {"sizes": "-", "scale": "none"}),
    "mg.gather_from_tensor_model_parallel_region": simple(
        "all_gather", "ag_bwd_own", -1, {"sizes": "-"},
        {"sizes": "-", "scale": "none"}),
    "mg.scatter_to_sequence_parallel_region": mg_scatter_sp,
    "mg.gather_from_sequence_parallel_region": mg_gather_sp,
    "mg.reduce_scatter_to_sequence_parallel_region": mg_reduce_scatter_sp,
    "mg.all_gather_last_dim_from_tensor_parallel_region": simple(
        "all_gather", "ag_bwd_sum", -1, {"sizes": "-"}, {"sizes": "-"}),
    "mg.reduce_scatter_last_dim_to_tensor_parallel_region": simple(
        "reduce_scatter", "all_gather", -1, {"sizes": "-"}, {"sizes": "-"}),
    "mg.all_to_all": mg_all_to_all,
    "mg.all_to_all_sp2hp": simple("sp2hp", "hp2sp"),
    "mg.all_to_all_hp2sp": simple("hp2sp", "sp2hp"),
}


def convert(c, src):
    """The case file record of one case and the files it needs."""
    k = Case(c, src)
    if c["dtype"] not in ELEM:
        raise SystemExit("%s: dtype %s not handled" % (c["name"], c["dtype"]))
    if c["op"] in BATCH_PROGRAMS:
        BATCH_PROGRAMS[c["op"]](k)  # it picks its tensors itself
    else:
        k.expected()
        PROGRAMS[c["op"]](k)
    roles = {line.split("=")[0].split(".")[2] for line in k.lines}
    if "gradout" not in roles or "gradin" not in roles:
        k.bwd = []  # forward-only vector (no autograd, or no seed grads)
    if "out" not in roles:
        raise SystemExit("%s: no expected output" % c["name"])
    if c["status"] != "ok" and k.expect == "ok" and not (
            k.notes or c["op"] == "ms.all_to_all"):
        raise SystemExit("%s: seed %s not handled" % (c["name"], c["status"]))
    rec = ["case " + c["name"], "op=" + c["op"], "world=%d" % k.w,
           "dtype=" + c["dtype"]]
    if k.cp:
        rec.append("cp=%d,%d" % k.cp)
    rec.append("expect=" + k.expect)
    rec += ["from.%s=%s" % (r, n) for r, n in sorted(k.notes.items())]
    rec += k.lines
    rec.append("fwd=" + ";".join(k.fwd))
    if k.bwd:
        rec.append("bwd=" + ";".join(k.bwd))
    rec.append("end")
    return rec, k


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--src", default=DEFAULT_SRC)
    ap.add_argument("--dst", default=DEFAULT_DST)
    a = ap.parse_args()
    with open(os.path.join(a.src, "manifest.json")) as f:
        manifest = json.load(f)
    dst = os.path.normpath(a.dst)
    if os.path.isdir(dst):
        # A re-import replaces everything, but only a folder made by us.
        if os.listdir(dst) and not os.path.exists(
                os.path.join(dst, "cases.txt")):
            raise SystemExit("%s exists and has no cases.txt: not ours" % dst)
        shutil.rmtree(dst)
    os.makedirs(dst)
    head = ("# generated by scripts/conformance_import.py from the seed "
            "conformance manifest (torch %s, %s); do not edit"
            % (manifest.get("torch_version"), manifest.get("backend")))
    files = {"cases.txt": [head], "batch_cases.txt": [head]}
    nrun = nskip = 0
    for c in manifest["cases"]:
        out = files["batch_cases.txt" if c["op"] in BATCH_PROGRAMS
                    else "cases.txt"]
        if c["op"] in SKIP:
            out.append("skip %s %s" % (c["name"], SKIP[c["op"]]))
            nskip += 1
            continue
        rec, k = convert(c, a.src)
        cdir = os.path.join(dst, c["name"])
        os.makedirs(cdir)
        for name in sorted(set(k.copies)):
            shutil.copyfile(os.path.join(k.src, name),
                            os.path.join(cdir, name))
        for name, data in k.derived.items():
            with open(os.path.join(cdir, name), "wb") as f:
                f.write(data)
        out += rec
        nrun += 1
    for name, lines in files.items():
        with open(os.path.join(dst, name), "w") as f:
            f.write("\n".join(lines) + "\n")
    nbatch = sum(line.startswith("case ")
                 for line in files["batch_cases.txt"])
    print("conformance_import: %d cases (%d batch), %d skipped -> %s"
          % (nrun, nbatch, nskip, dst))


if __name__ == "__main__":
    sys.exit(main())
