"""CUDA tensors through spcoll on a GPU: every native op and the torch
backend's collectives on CUDA tensors against the same ops on CPU
tensors, stream order on a side stream and with async handles, torch's
empty_cache while ops are in flight, zero copy from spcoll device memory
(cuda_checks.py). Two placements: every rank on GPU 0 (the daemon's CUDA
mover) and, with two GPUs or more, one GPU per rank (NCCL).

Runs only where torch sees a GPU: a real one, or spcsim under PyPI torch
(`make check-python-cuda-sim`). Elsewhere every test here is SKIPPED,
never passed. Whether torch sees a GPU is asked in a child process: CUDA
initialized in this process would not survive the fork of the ranks."""
import os

import pytest

import cuda_checks
import cuda_probe
import launch

WORLD = 2


def gpus():
    n = cuda_probe.gpus()
    if not isinstance(n, int):
        pytest.skip(n)
    if n == 0:
        pytest.skip("no CUDA device visible to torch %s: the CUDA tensor "
                    "suite needs a GPU (or spcsim: make "
                    "check-python-cuda-sim)" % _torch_version())
    return n


def _torch_version():
    import torch
    return torch.__version__


_runs = {}
_movers = {}

# The daemon's mover for each placement: every rank on one GPU moves with
# the CUDA mover (IPC and the plan kernel), one GPU per rank with NCCL.
MOVER = {"one_gpu": ("mover_cuda_ops", "mover_nccl_ops"),
         "gpu_per_rank": ("mover_nccl_ops", "mover_cuda_ops"),
         "unordered": ("mover_cuda_ops", "mover_nccl_ops")}


def _stats(daemon):
    """The daemon's counters, through spcollctl beside spcolld."""
    import subprocess
    from conftest import SPCOLLD
    ctl = os.path.join(os.path.dirname(SPCOLLD), "spcollctl")
    out = subprocess.run([ctl, "--socket", daemon, "stats"], check=True,
                         capture_output=True, text=True, timeout=60).stdout
    return {k: int(v) for k, v in
            (l.split() for l in out.splitlines() if len(l.split()) == 2
             and l.split()[1].lstrip("-").isdigit())}


@pytest.fixture(scope="module")
def results(daemon, workdir):
    def get(placement):
        n = gpus()
        if placement == "gpu_per_rank" and n < WORLD:
            pytest.skip("one GPU per rank needs %d GPUs, torch sees %d"
                        % (WORLD, n))
        if placement not in _runs:
            d = os.path.join(workdir, "cuda-" + placement)
            before = _stats(daemon)
            store = None if placement == "unordered" else \
                os.path.join(d, "store")
            _runs[placement] = launch.run_ranks(
                WORLD, cuda_checks.run,
                (daemon, placement, str(os.getpid()), store), d, guard=180)
            after = _stats(daemon)
            _movers[placement] = {k: after.get(k, 0) - before.get(k, 0)
                                  for k in MOVER[placement]}
        return _runs[placement]
    return get


@pytest.mark.parametrize("placement", ["one_gpu", "gpu_per_rank"],
                         ids=[p + ("-simulated" if cuda_checks.SIM else "")
                              for p in ("one_gpu", "gpu_per_rank")])
def test_cuda_mover(results, placement):
    """The placement's ops ran on the mover it is meant to check."""
    results(placement)
    used, other = MOVER[placement]
    moved = _movers[placement]
    assert moved[used] > 0 and moved[other] == 0, moved


NAMES = [f.__name__ for f in cuda_checks.CHECKS + cuda_checks.BACKEND_CHECKS]


# On spcsim every result is labelled simulated, in its test id too.
PLACEMENT_IDS = [p + ("-simulated" if cuda_checks.SIM else "")
                 for p in ("one_gpu", "gpu_per_rank")]


@pytest.mark.parametrize("placement", ["one_gpu", "gpu_per_rank"],
                         ids=PLACEMENT_IDS)
@pytest.mark.parametrize("name", NAMES)
def test_cuda(results, placement, name):
    bad, skips = [], set()
    for r, res in enumerate(results(placement)):
        if "__error__" in res:
            bad.append(res["__error__"])
            continue
        got = res.get(name, ["not run"])
        if isinstance(got, str):
            skips.add(got[len("SKIP: "):])
        else:
            bad.extend("rank %d: %s" % (r, f) for f in got)
    assert not bad, "\n".join(bad[:20])
    if skips:
        pytest.skip("; ".join(sorted(skips)))


def test_expandable_segments_in_place(daemon, workdir):
    """Processes whose allocator uses expandable segments (cuMem memory):
    ordinary CUDA tensors go in place, bitwise right, none staged, also a
    tensor over two of its mappings and across empty_cache with an op in
    flight; spcoll's MemPool tensors too (cuda_checks.expandable_rank)."""
    _cxx_ranks(daemon, workdir, "expandable", cuda_checks.expandable_rank)


def _cxx_ranks(daemon, workdir, name, fn):
    """fn on WORLD ranks of the C++ backend; each must have compared
    something and failed nothing."""
    gpus()
    import spcoll.distributed as sd
    if sd.backend_kind() != "c++":
        pytest.skip("the C++ backend is not the one registered (%s)"
                    % sd.backend_kind())
    d = os.path.join(workdir, name)
    res = launch.run_ranks(WORLD, fn, (daemon, os.path.join(d, "store")), d,
                           guard=120)
    for r, got in enumerate(res):
        assert "__error__" not in got, got["__error__"]
        assert not got["failures"], "rank %d: %s" % (r, got["failures"])
        assert got["compared"] > 0, "rank %d compared nothing" % r


def test_ranks_disagreeing_on_in_place_agree_per_op(daemon, workdir):
    """One rank with SPCOLL_CUDA_DIRECT=0, one without: their CUDA ops
    still meet (cuda_checks.disagree_rank)."""
    _cxx_ranks(daemon, workdir, "disagree", cuda_checks.disagree_rank)


def test_stream_checks_see_a_missing_wait(results):
    """The control: with the daemon ordered after the wrong stream, both
    stream checks fail. Only on spcsim, whose trainers' streams are slowed
    (SPCSIM_SLOW_STREAMS in cuda_sim.sh) so that the daemon reads before
    the copies it did not wait for; a real GPU's timing is not ours."""
    if not cuda_checks.SIM or not os.environ.get("SPCSIM_SLOW_STREAMS"):
        pytest.skip("the negative control needs spcsim's slow streams "
                    "(make check-python-cuda-sim)")
    res = results("unordered")
    for r, got in enumerate(res):
        assert "__error__" not in got, got.get("__error__")
        for name in cuda_checks.STREAM_CHECKS:
            assert got[name], ("rank %d: %s passed with the daemon ordered "
                               "after the wrong stream" % (r, name))


@pytest.mark.parametrize("order", ["flags", "events"])
def test_dead_client_times_out_and_stop_is_bounded(workdir, order, monkeypatch):
    """A rank dies before its stream marks its op's input ready: the
    daemon's stream waits for a stream that will never get there. The
    other rank fails at the group's 3 s timeout (the op timeout covers an
    op running in its engine), and its stream is let go. The daemon's
    stream stays where it is, in both orders (stream flags, and events:
    SPCOLL_GPU_ORDER=events): running the op's work now could write the
    output the other rank's next work uses. spcolld, stopped, exits at
    once with status 3 naming the op, rather than waiting for ever. Its
    own daemon: the stuck stream would hold the shared one's GPU 0."""
    if not cuda_checks.SIM or not os.environ.get("SPCSIM_SLOW_STREAMS"):
        pytest.skip("needs spcsim's slow streams to queue the start event "
                    "behind work the dead rank never finishes "
                    "(make check-python-cuda-sim)")
    gpus()
    from conftest import start_spcolld, stop_spcolld
    d = os.path.join(workdir, "dead-client")
    os.makedirs(d, exist_ok=True)
    d = os.path.join(d, order)
    os.makedirs(d, exist_ok=True)
    monkeypatch.setenv("SPCOLL_GPU_ORDER", order)  # the ranks' clients
    p, sock, log = start_spcolld(d)
    res = launch.run_ranks(2, cuda_checks.dead_client_rank, (sock,),
                           os.path.join(d, "ranks"), guard=120)
    rc = stop_spcolld(p, log)
    text = open(log.name).read()
    assert "rank 0 died" in res[0].get("__error__", ""), res[0]
    assert res[1].get("res") == "raised", (res[1], text[-2000:])
    assert "timed out" in res[1]["msg"] and "running in the" in \
        res[1]["msg"], res[1]["msg"]
    assert rc == 3 and "still running in its engine" in text, \
        (rc, text[-2000:])
