"""The Python package's ops against the library's one op list
(kernels/op_list.h, read through spc_op_info at import): every op of the
list has its constructor and its function here, spcoll.h numbers it the
same, and the autograd pairs are the list's."""
import inspect
import os
import re

from spcoll import _lib, autograd, ops

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_list_read_from_the_library():
    with open(os.path.join(REPO, "client", "spcoll.h")) as f:
        public = {m.group(1).lower(): int(m.group(2)) for m in
                  re.finditer(r"SPC_OP_(\w+) = (\d+)", f.read())}
    assert len(public) >= 10, "no SPC_OP_ values found in spcoll.h"
    assert {n: i.kind for n, i in _lib.OPS.items()} == public
    assert sorted(i.kind for i in _lib.OPS.values()) == \
        list(range(1, len(_lib.OPS) + 1))


def test_every_op_has_constructor_and_function():
    for name, info in _lib.OPS.items():
        assert "spc_op_" + name in _lib._PROTOS, name
        ctor = getattr(_lib.lib, "spc_op_" + name)
        args = {"all_to_all": (0, 1, 0), "all_to_all_v": (None, None),
                "all_reduce": (0,), "packed_split": (0, None, 0),
                "packed_gather": (0, None, 0)}.get(name, (0, None))
        if name in ("zigzag_split", "zigzag_gather"):
            args = (0,)
        assert ctor(*args).kind == info.kind, name
        assert callable(getattr(ops, name)), name


def test_gradient_pairs_are_the_lists():
    seeds = {"split": ("all_gather", "down"), "all_gather": ("split", "up"),
             "all_to_all": ("all_to_all", None),
             "zigzag_split": ("zigzag_gather", "down"),
             "zigzag_gather": ("zigzag_split", "up"),
             "packed_split": ("packed_gather", "down"),
             "packed_gather": ("packed_split", "up")}
    for name, (grad, scale) in seeds.items():
        assert (_lib.OPS[name].grad, _lib.OPS[name].grad_scale) == (grad, scale)
        fn, s = ops.gradient(name)
        assert fn is getattr(ops, grad) and s == scale, name
    assert _lib.OPS["all_reduce"].grad is None
    assert _lib.OPS["all_reduce"].reduces and _lib.OPS["reduce_scatter"].reduces
    assert not _lib.OPS["split"].reduces
    # the seeds' defaults of the autograd functions are the list's scales
    sig = inspect.signature(autograd.split_forward_gather_backward)
    assert sig.parameters["grad_scale"].default == "down"
    sig = inspect.signature(autograd.gather_forward_split_backward)
    assert sig.parameters["grad_scale"].default == "up"
