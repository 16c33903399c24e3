"""torch.distributed backend "spcoll" (spcoll.distributed) with a real
spcolld and 2, 3 and 4 rank processes: every check of backend_checks is
its own test per world size (see that module)."""
import os

import pytest

import backend_checks
import launch

_launched = {}


@pytest.fixture(scope="module")
def results(daemon, workdir):
    def get(world):
        if world not in _launched:
            d = os.path.join(workdir, "backend-w%d" % world)
            _launched[world] = launch.run_ranks(
                world, backend_checks.run,
                (daemon, os.path.join(d, "store"), str(os.getpid())), d,
                guard=400)
        return _launched[world]
    return get


NAMES = [f.__name__ for f in backend_checks.CHECKS]


@pytest.mark.parametrize("world", [2, 3, 4])
@pytest.mark.parametrize("name", NAMES)
def test_backend(results, world, name):
    bad = []
    for r, res in enumerate(results(world)):
        if "__error__" in res:
            bad.append(res["__error__"])
        else:
            bad.extend("rank %d: %s" % (r, f) for f in res.get(name, ["not run"]))
    assert not bad, "\n".join(bad[:20])


@pytest.mark.parametrize("world", [2, 3, 4])
def test_gloo_was_compared(results, world):
    """The checks compared with gloo wherever gloo has the op and dtype
    (torch 1.13's gloo lacks bfloat16, bool, AVG and reduce_scatter; those
    cases compare with the local reference only)."""
    for r, res in enumerate(results(world)):
        if "__error__" in res:
            continue        # reported by the checks' own tests
        n = sum(v[0] for k, v in res.items() if k.startswith("gloo:"))
        lacks = [x for k, v in res.items() if k.startswith("gloo:") for x in v[1]]
        assert n >= 100, "rank %d compared %d results with gloo" % (r, n)
        known = ("Invalid scalar type", "AVG", "does not support reduce_scatter",
                 "does not support _reduce_scatter_base")
        assert all(any(k in x for k in known) for x in lacks), \
            [x for x in lacks if not any(k in x for k in known)]
