"""A training loop through torch.distributed on backend "spcoll" lives
through an upgrade of the daemon (spcolld --upgrade, issue 36). Rank 0
starts the new daemon before step UPGRADE_AT. The C++ backend (torch 2.x)
issues blocking collectives with spc_run: the old daemon, draining,
either finishes them or refuses them as not run, and the client sends
them to the new daemon, so no step fails and the losses are gloo's. The
Python backend (torch 1.13) issues through spc_start, whose refused
requests are not sent again: there a step may fail, but only with
SPC_ERESTARTED, and a loop that ends has gloo's losses."""
import os
import signal
import subprocess

import torch

import backend_train
import launch
import spcoll  # noqa: F401 (registers the backend)
from conftest import SPCOLLD, start_spcolld

STEPS, UPGRADE_AT = 6, 3
PYTHON_BACKEND = torch.__version__.startswith("1.")


def _rank(rank, world, sock, store, log):
    def before(step):
        if rank == 0 and step == UPGRADE_AT:
            with open(log, "wb") as out:
                pid = subprocess.Popen(
                    [SPCOLLD, "--socket", sock, "--workers", "2", "--upgrade"],
                    stdout=out, stderr=out, start_new_session=True).pid
            with open(log + ".pid", "w") as f:
                f.write(str(pid))

    return backend_train.train_vs_gloo(rank, world, sock, store, STEPS,
                                       before)


def test_training_lives_through_an_upgrade(tmp_path):
    old, sock, log = start_spcolld(str(tmp_path))
    new_log = str(tmp_path / "new.log")
    res = launch.run_ranks(2, _rank, (sock, str(tmp_path / "store"), new_log),
                           str(tmp_path / "out"), guard=300)
    new = None
    if os.path.exists(new_log + ".pid"):
        new = int(open(new_log + ".pid").read())
    try:
        errors = [r["__error__"] for r in res if "__error__" in r]
        if PYTHON_BACKEND:
            assert all("(SPC_ERESTARTED)" in e for e in errors), \
                "\n".join(errors)
        else:
            assert not errors, "\n".join(errors)
        assert new is not None, "rank 0 started no new daemon"
        # The old daemon handed its sockets over and left by itself.
        assert old.wait(60) == 0, open(log.name).read()
        assert "took the sockets" in open(new_log).read()
        for r in res:
            if "__error__" in r:
                continue
            backend_train.losses_match(r, STEPS)
    finally:
        log.close()
        if new is not None:
            os.kill(new, signal.SIGTERM)
