"""Upstream sequence-parallel code from PyPI, unchanged, on backend "spcoll"
against backend "gloo" (see upstream_ranks). Run by make
check-python-upstream in the newest-torch virtualenv, where the libraries
are installed."""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

import launch  # noqa: E402
import upstream_ranks  # noqa: E402
from conftest import daemon, workdir  # noqa: E402,F401 (fixtures)

_res = {}

NAMES = (["megatron." + n for n in (
    "copy_to_tp_region reduce_from_tp_region scatter_to_tp_region "
    "gather_from_tp_region scatter_to_sp_region gather_from_sp_region "
    "gather_from_sp_region_no_tp_grad gather_from_sp_region_uneven "
    "gather_from_sp_region_uneven_no_tp_grad reduce_scatter_to_sp_region "
    "all_gather_last_dim reduce_scatter_last_dim all_to_all all_to_all_sp2hp "
    "all_to_all_hp2sp").split()] +
    ["yunchang." + n for n in ("SeqAllToAll4D_seq_to_head "
                               "SeqAllToAll4D_head_to_seq "
                               "RingComm_kv_ring").split()] +
    ["deepspeed.DistributedAttention"] +
    ["ringmaster." + n for n in ("seq_all_to_all ring_p2p_attention "
                                 "ring_p2p_attention_causal").split()])


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("name", NAMES)
def test_upstream(daemon, workdir, world, name):
    if world not in _res:
        d = os.path.join(workdir, "upstream-w%d" % world)
        _res[world] = launch.run_ranks(world, upstream_ranks.run,
                                       (daemon, os.path.join(d, "store")), d,
                                       guard=300)
    bad = []
    for r, out in enumerate(_res[world]):
        if "__error__" in out:
            bad.append(out["__error__"])
        for lib in ("megatron", "yunchang", "deepspeed", "ringmaster"):
            if lib in out:
                bad.extend(out[lib])
        bad.extend("rank %d: %s" % (r, f) for f in out.get(name, ["not run"]))
    assert not bad, "\n".join(bad[:10])
