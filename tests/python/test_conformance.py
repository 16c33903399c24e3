"""The wrappers replay the seeds' recorded 2-rank runs (see conformance.py):
one launch of 2 ranks runs every case; each case is its own test."""
import os

import pytest

import conformance
import launch

CASES = [c.name for c in conformance.load()]
_results = {}


@pytest.fixture(scope="module")
def results(daemon, workdir):
    if not _results:
        _results["r"] = launch.run_ranks(
            2, conformance.run_all, (daemon, str(os.getpid())),
            os.path.join(workdir, "conformance"))
    return _results["r"]


@pytest.mark.parametrize("name", CASES)
def test_seed_case(results, name):
    bad = []
    for r, res in enumerate(results):
        if "__error__" in res:
            bad.append(res["__error__"])
        else:
            bad.extend("rank %d: %s" % (r, f) for f in res.get(name, ["not run"]))
    assert not bad, "\n".join(bad)
