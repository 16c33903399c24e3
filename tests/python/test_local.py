"""One process: pool, lifetime, threads, errors (see local_checks.py)."""
import os

import pytest

import launch
import local_checks

_res = {}


@pytest.fixture(scope="module")
def results(daemon, workdir):
    if not _res:
        _res["r"] = launch.run_ranks(1, local_checks.run, (daemon,),
                                     os.path.join(workdir, "local"), guard=120)[0]
    return _res["r"]


@pytest.mark.parametrize("name", local_checks.NAMES)
def test_local(results, name):
    assert "__error__" not in results, results.get("__error__")
    assert results[name] == [], "\n".join(results[name])
