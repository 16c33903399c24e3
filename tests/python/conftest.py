"""Shared fixtures: a private spcolld for the session, and paths.

Paths come from the environment that `make check-python` sets (SPCOLLD,
SPCOLL_LIB, SPCOLL_CPEER), else from the build tree ($SPCOLL_BUILD or
build/ under the repository)."""
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BUILD = os.path.join(REPO, os.environ.get("SPCOLL_BUILD", "build"))
SPCOLLD = os.environ.get("SPCOLLD") or os.path.join(BUILD, "bin", "spcolld")
CPEER = os.environ.get("SPCOLL_CPEER") or os.path.join(BUILD, "python", "spcoll_cpeer")

sys.path.insert(0, HERE)
if os.path.join(REPO, "client", "python") not in sys.path:
    sys.path.insert(0, os.path.join(REPO, "client", "python"))


@pytest.fixture(scope="session")
def workdir():
    with tempfile.TemporaryDirectory(prefix="spcoll-py-") as d:
        yield d


def start_spcolld(d):
    """A spcolld on d/spcolld.sock, logging to d/spcolld.log, once its
    socket accepts: (process, socket path, log file)."""
    if not os.access(SPCOLLD, os.X_OK):
        pytest.fail("no spcolld at %s: build it (make all) or set SPCOLLD" % SPCOLLD)
    sock = os.path.join(d, "spcolld.sock")
    log = open(os.path.join(d, "spcolld.log"), "wb")
    p = subprocess.Popen([SPCOLLD, "--socket", sock, "--workers", "2",
                          "--log-level", "info"], stdout=log, stderr=log)
    for _ in range(1000):         # readiness, not a timing check
        if p.poll() is not None:
            break
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(sock)
            return p, sock, log
        except OSError:
            time.sleep(0.01)
    p.kill()
    pytest.fail("spcolld did not start:\n" + open(log.name).read())


def stop_spcolld(p, log):
    """SIGTERM; its exit status, or "hung after SIGTERM" (killed)."""
    p.send_signal(signal.SIGTERM)
    try:
        rc = p.wait(30)
    except subprocess.TimeoutExpired:
        p.kill()
        rc = "hung after SIGTERM"
    log.close()
    return rc


@pytest.fixture(scope="session")
def daemon(workdir):
    """A private spcolld; its clean exit at the end is part of the run."""
    p, sock, log = start_spcolld(workdir)
    yield sock
    rc = stop_spcolld(p, log)
    if rc != 0:
        pytest.fail("spcolld exited with %s; log:\n%s" % (rc, open(log.name).read()))
