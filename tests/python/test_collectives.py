"""Every wrapper against the same computation in plain torch.distributed
(gloo), with a real spcolld and 2, 3 and 4 rank processes. One launch per
world size runs all of its checks; each check is reported as its own test
and fails when any rank saw a difference (or raised, or hung)."""
import os

import pytest

import launch
import rank_main
from registry import params

_launched = {}


@pytest.fixture(scope="module")
def results(daemon, workdir):
    def get(world):
        if world not in _launched:
            d = os.path.join(workdir, "w%d" % world)
            _launched[world] = launch.run_ranks(
                world, rank_main.run_checks,
                (daemon, os.path.join(d, "gloo.store"), str(os.getpid())), d)
        return _launched[world]
    return get


@pytest.mark.parametrize("world,name", params(),
                         ids=["w%d-%s" % p for p in params()])
def test_check(results, world, name):
    per_rank = results(world)
    bad = []
    for r, res in enumerate(per_rank):
        if "__error__" in res:
            bad.append(res["__error__"])
        elif name not in res:
            bad.append("rank %d did not run %s" % (r, name))
        elif res[name]:
            bad.extend("rank %d: %s" % (r, f) for f in res[name])
    assert not bad, "\n".join(bad)
