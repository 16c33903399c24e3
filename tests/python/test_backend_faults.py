"""A killed rank and a timeout under backend "spcoll": errors on every
surviving rank, no hang (see backend_faults)."""
import os

import backend_faults
import launch


def test_killed_rank_fails_the_others(daemon, workdir):
    d = os.path.join(workdir, "backend-killed")
    res = launch.run_ranks(3, backend_faults.killed_rank,
                           (daemon, os.path.join(d, "store")), d, guard=120)
    assert "__error__" in res[2] and "exit code 0" in res[2]["__error__"], res[2]
    for r in (0, 1):
        assert "__error__" not in res[r], res[r]["__error__"]
        assert res[r]["first"] == [3.0] * 4
        for e in res[r]["errors"]:
            assert e is not None and "spcoll" in e, res[r]
            assert "SPC_EPEERLOST" in e or "SPC_EMISMATCH" in e, e


def _two_ranks(fn, name, daemon, workdir):
    """fn's results on 2 ranks, neither of which raised or hung."""
    d = os.path.join(workdir, name)
    res = launch.run_ranks(2, fn, (daemon, os.path.join(d, "store")), d,
                           guard=120)
    for r in (0, 1):
        assert "__error__" not in res[r], res[r]["__error__"]
    return res


def test_timeout_is_an_error_on_every_rank(daemon, workdir):
    res = _two_ranks(backend_faults.timeout, "backend-timeout", daemon,
                     workdir)
    assert res[0]["error"] and "SPC_ETIMEDOUT" in res[0]["error"], res[0]
    assert res[1]["error"] and "spcoll" in res[1]["error"], res[1]
    assert res[0]["after"] and "broken" in res[0]["after"], res[0]
    assert res[1]["after"] and "spcoll" in res[1]["after"], res[1]


def test_wait_with_its_own_timeout_gives_up_in_time(daemon, workdir):
    res = _two_ranks(backend_faults.wait_gives_up, "backend-wait-gives-up",
                     daemon, workdir)
    assert res[0]["error"] and "Timed out" in res[0]["error"], res[0]
    # it gave up at its own bound, not at the op's end (rank 1 issues the
    # op only after this, so that end would come at the group's 30 s)
    assert res[0]["seconds"] < 20, res[0]
    assert res[0]["after"] and "broken" in res[0]["after"], res[0]
    first, second = res[1]["ops"]
    assert first is None or "spcoll" in first, res[1]
    assert second and "spcoll" in second, res[1]
