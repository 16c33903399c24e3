"""Backend "spcoll" across two nodes: two spcolld peered over UCX on
loopback tcp (as the C multi-node suites run them), 4 ranks, two per
daemon. The user's code is the same as on one node; only each rank's
SPCOLL_SOCKET differs. A subset of backend_checks, against gloo."""
import os
import signal
import socket
import subprocess
import time

import pytest

import backend_checks
import launch
from conftest import SPCOLLD

# P2P: the ring (pairs across the daemons and within one), tags, receive
# from any source and a count mismatch, all on the daemons' P2P op.
ONLY = ["all_reduce_vs_gloo", "all_to_all_single_vs_gloo", "all_gather",
        "all_to_all", "rooted_vs_gloo", "p2p_ring", "p2p_tags_and_any_source",
        "p2p_mismatch_fails_both", "mismatch_fails_everywhere",
        "train_ulysses_three_steps"]


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def two_nodes(workdir):
    peers = ",".join("127.0.0.1:%d" % _free_port() for _ in range(2))
    env = dict(os.environ, UCX_TLS=os.environ.get("UCX_TLS", "tcp"))
    key = os.path.join(workdir, "peer.key")    # the node key both share
    fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.write(fd, os.urandom(32))
    os.close(fd)
    procs, socks, logs = [], [], []
    for i in range(2):
        d = os.path.join(workdir, "node%d" % i)   # its own stats socket
        os.makedirs(d, exist_ok=True)
        sock = os.path.join(d, "spcolld.sock")
        log = open(os.path.join(d, "spcolld.log"), "wb")
        procs.append(subprocess.Popen(
            [SPCOLLD, "--socket", sock, "--workers", "2", "--peers", peers,
             "--node-index", str(i), "--peer-key-file", key], stdout=log, stderr=log, env=env))
        socks.append(sock)
        logs.append(log)
    for sock, p in zip(socks, procs):
        for _ in range(1000):          # readiness, not a timing check
            if p.poll() is not None or os.path.exists(sock):
                break
            time.sleep(0.01)
        assert p.poll() is None, open(logs[socks.index(sock)].name).read()
    yield socks
    for p in procs:
        p.send_signal(signal.SIGTERM)
    rcs = []
    for p in procs:
        try:
            rcs.append(p.wait(30))
        except subprocess.TimeoutExpired:
            p.kill()
            rcs.append("hung after SIGTERM")
    for log in logs:
        log.close()
    assert rcs == [0, 0], "daemons exited with %s" % rcs


_res = {}


@pytest.mark.parametrize("name", ONLY)
def test_two_nodes(two_nodes, workdir, name):
    if not _res:
        d = os.path.join(workdir, "backend-2nodes")
        socks = [two_nodes[0]] * 2 + [two_nodes[1]] * 2
        _res["r"] = launch.run_ranks(
            4, backend_checks.run,
            (socks, os.path.join(d, "store"), "2nodes", ONLY), d, guard=300)
    bad = []
    for r, res in enumerate(_res["r"]):
        if "__error__" in res:
            bad.append(res["__error__"])
        else:
            bad.extend("rank %d: %s" % (r, f) for f in res.get(name, ["not run"]))
    assert not bad, "\n".join(bad[:20])
