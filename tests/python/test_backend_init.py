"""init_process_group("spcoll") through env:// and tcp://, two jobs on
one daemon at once: each job sums only its own ranks' values, and their
spcoll groups have different names (the job id agreed through torch's
store)."""
import multiprocessing.pool
import os
import socket

import backend_init
import launch


def _ports(n):
    """n distinct free ports (held together while probing, so two jobs
    never draw the same one)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _job(args):
    """One job of 2 ranks; a port another process took between our probe
    and the store's bind (EADDRINUSE) is retried with another port."""
    daemon, workdir, method, value, port = args
    for attempt in range(3):
        d = os.path.join(workdir, "init-%s-%d-%d" % (method, value, attempt))
        res = launch.run_ranks(2, backend_init.run,
                               (daemon, method, port, value,
                                os.path.join(d, "sync")), d, guard=90)
        port = _ports(1)[0]
        if not any("EADDRINUSE" in r.get("__error__", "") for r in res):
            return res
    return res


def test_env_and_tcp_jobs_at_once(daemon, workdir):
    p1, p2 = _ports(2)
    jobs = [(daemon, workdir, "env", 10, p1), (daemon, workdir, "tcp", 100, p2)]
    # both jobs run at the same time, from two launcher threads
    with multiprocessing.pool.ThreadPool(2) as pool:
        res = pool.map(_job, jobs)
    names = set()
    for (_, _, method, value, _), ranks in zip(jobs, res):
        for r, out in enumerate(ranks):
            assert "__error__" not in out, out["__error__"]
            want = float(2 * value + 1)
            assert out["sum"] == [want, want], (method, r, out)
        assert ranks[0]["name"] == ranks[1]["name"]
        assert ranks[0]["sub"] == ranks[1]["sub"] != ranks[0]["name"]
        names.add(ranks[0]["name"])
    assert len(names) == 2, names
