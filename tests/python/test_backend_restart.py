"""A training loop through torch.distributed on backend "spcoll" lives
through a crash of the daemon (issue 36): at step KILL_AT, once every rank
finished the step before (they meet in files, not through the daemon),
rank 0 SIGKILLs spcolld and starts a new one on the same socket. The
ranks' code does nothing about it: their next collective reconnects,
registers again and rejoins, and runs. Every step's loss is gloo's, the
steps after the restart included. (An op in flight at a crash fails with
SPC_ERESTARTED on every rank instead: test_restart covers that in C.)"""
import os
import signal
import socket
import subprocess
import time


import backend_train
import launch
import spcoll  # noqa: F401 (registers the backend)
from conftest import SPCOLLD, start_spcolld

STEPS, KILL_AT = 6, 3


def _wait_for(path):
    while not os.path.exists(path):  # the parent's guard bounds this
        time.sleep(0.01)


def _dead(pid):
    """Until pid has exited (a zombie of the test's own process, or gone):
    its sockets are closed then, so no rank's op can still reach it."""
    while True:  # the parent's guard bounds this
        try:
            with open("/proc/%d/stat" % pid) as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return
        except FileNotFoundError:
            return
        time.sleep(0.01)


def _restart(old_pid, sock, log):
    """SIGKILL the daemon and, once it is dead, start another on its
    socket; its pid."""
    os.kill(old_pid, signal.SIGKILL)
    _dead(old_pid)
    with open(log, "wb") as out:
        p = subprocess.Popen([SPCOLLD, "--socket", sock, "--workers", "2"],
                             stdout=out, stderr=out, start_new_session=True)
    with open(log + ".pid", "w") as f:
        f.write(str(p.pid))
    while True:  # readiness; the parent's guard bounds it
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(sock)
            return
        except OSError:
            time.sleep(0.01)


def _rank(rank, world, sock, store, old_pid, d):
    def before(step):
        if step != KILL_AT:
            return
        open(os.path.join(d, "at.%d" % rank), "w").close()
        if rank == 0:
            for r in range(world):
                _wait_for(os.path.join(d, "at.%d" % r))
            _restart(old_pid, sock, os.path.join(d, "new.log"))
            open(os.path.join(d, "go"), "w").close()
        else:
            _wait_for(os.path.join(d, "go"))

    return backend_train.train_vs_gloo(rank, world, sock, store, STEPS,
                                       before)


def test_training_lives_through_a_crash(tmp_path):
    old, sock, log = start_spcolld(str(tmp_path))
    d = str(tmp_path)
    res = launch.run_ranks(2, _rank, (sock, str(tmp_path / "store"), old.pid,
                                      d), str(tmp_path / "out"), guard=300)
    pid_file = os.path.join(d, "new.log.pid")
    new = int(open(pid_file).read()) if os.path.exists(pid_file) else None
    try:
        errors = [r["__error__"] for r in res if "__error__" in r]
        assert not errors, "\n".join(errors)
        assert new is not None, "rank 0 started no new daemon"
        assert old.wait(60) == -signal.SIGKILL
        for r in res:
            backend_train.losses_match(r, STEPS)
    finally:
        log.close()
        if new is not None:
            os.kill(new, signal.SIGTERM)
