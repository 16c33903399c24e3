"""A training loop through torch.distributed on backend "spcoll" lives
through an upgrade of the daemon (spcolld --upgrade, issue 36). Rank 0
starts the new daemon before step UPGRADE_AT; the loop's collectives are
blocking ones, which the old daemon, draining, either finishes or
refuses as not run, and the client then sends to the new daemon. No step
fails, and the losses are those of the same loop on gloo."""
import os
import signal
import subprocess

import torch
import torch.distributed as dist

import backend_train
import launch
import spcoll  # noqa: F401 (registers the backend)
from conftest import SPCOLLD, start_spcolld

STEPS, UPGRADE_AT = 6, 3


def _rank(rank, world, sock, store, log):
    os.environ["SPCOLL_SOCKET"] = sock
    torch.set_num_threads(1)
    dist.init_process_group("spcoll", init_method="file://" + store,
                            rank=rank, world_size=world)
    gloo = dist.new_group(backend="gloo")
    started = []

    def before(step):
        if rank == 0 and step == UPGRADE_AT:
            with open(log, "wb") as out:
                started.append(subprocess.Popen(
                    [SPCOLLD, "--socket", sock, "--workers", "2", "--upgrade"],
                    stdout=out, stderr=out, start_new_session=True).pid)

    sp = backend_train.train(dist.group.WORLD, rank, world, STEPS, before)
    gl = backend_train.train(gloo, rank, world, STEPS)
    dist.destroy_process_group()
    return {"spcoll": sp, "gloo": gl, "new": started[0] if started else None}


def test_training_lives_through_an_upgrade(tmp_path):
    old, sock, log = start_spcolld(str(tmp_path))
    new_log = str(tmp_path / "new.log")
    res = launch.run_ranks(2, _rank, (sock, str(tmp_path / "store"), new_log),
                           str(tmp_path / "out"), guard=300)
    new = res[0].get("new") if "__error__" not in res[0] else None
    try:
        errors = [r["__error__"] for r in res if "__error__" in r]
        assert not errors, "\n".join(errors)
        assert new is not None, "rank 0 started no new daemon"
        # The old daemon handed its sockets over and left by itself.
        assert old.wait(60) == 0, open(log.name).read()
        for r in res:
            sp, gl = r["spcoll"], r["gloo"]
            assert len(sp) == STEPS and all(
                abs(a - b) <= 1e-5 * max(1.0, abs(b)) for a, b in zip(sp, gl)), \
                "losses spcoll %s vs gloo %s" % (sp, gl)
        assert "took the sockets" in open(new_log).read()
    finally:
        log.close()
        if new is not None:
            os.kill(new, signal.SIGTERM)
