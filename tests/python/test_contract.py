"""What torch's parallel APIs expect of a process-group backend, on backend
"spcoll" against gloo, at 2 and 4 ranks (contract_ranks has the rank bodies
and says how results are compared): DDP, FSDP1, FSDP2, a 2-D DeviceMesh,
tensor parallel, coalesced ops, destroying a sub-group, sub-groups that
differ between processes, async ops overlapping compute, and a barrier
that times out.

Each world size launches its ranks twice: once for every check of
contract_ranks.CHECKS (default timeout), once with a 2 s timeout for the
error checks. A check this torch lacks the API for is skipped, naming the
API and the torch version; every rank must skip it alike."""
import os

import pytest

import contract_ranks
import launch

_launched = {}
GUARD = {"main": 400, "timeout": 120}       # hang guards, not timing checks


@pytest.fixture(scope="module")
def results(daemon, workdir):
    def get(world, part):
        if (world, part) not in _launched:
            d = os.path.join(workdir, "contract-%s-w%d" % (part, world))
            fn = (contract_ranks.run_main if part == "main"
                  else contract_ranks.run_timeout)
            _launched[world, part] = launch.run_ranks(
                world, fn, (daemon, os.path.join(d, "store"), d), d,
                guard=GUARD[part])
            _launched[world, part, "dir"] = d
        return _launched[world, part]
    return get


def _progress(world, part):
    """Each rank's progress log (which checks finished, their first
    failures): the only trace of a launch whose ranks hung."""
    d = _launched.get((world, part, "dir"))
    out = []
    for r in range(world):
        p = os.path.join(d or "", "rank%d.progress" % r)
        if d and os.path.exists(p):
            with open(p) as f:
                out.append("--- rank %d progress:\n%s" % (r, f.read()[-4000:]))
    return "\n".join(out)


def judge(res, world, part, name):
    errors = [r["__error__"] for r in res if "__error__" in r]
    if errors:
        pytest.fail("rank processes failed:\n%s\n%s"
                    % ("\n".join(e[-3000:] for e in errors),
                       _progress(world, part)))
    entries = [r[name] for r in res]
    skips = [e["skip"] for e in entries]
    if any(skips):
        assert all(s == skips[0] for s in skips), \
            "ranks disagree on skipping: %s" % skips
        pytest.skip("%s (backend %s): %s" % (name, res[0]["__backend__"], skips[0]))
    bad = []
    for r, e in enumerate(entries):
        bad.extend("rank %d: %s" % (r, f) for f in e["failures"])
        if e["compared"] == 0:
            bad.append("rank %d: compared nothing" % r)
    for r, e in enumerate(entries):
        for n in e["notes"]:
            print("rank %d note: %s" % (r, n))
    assert not bad, "%s at %d ranks, backend %s:\n%s" % (
        name, world, res[0]["__backend__"], "\n".join(bad[:30]))


NAMES = [f.__name__ for f in contract_ranks.CHECKS]


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("name", NAMES)
def test_contract(results, world, name):
    judge(results(world, "main"), world, "main", name)


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("name", contract_ranks.TIMEOUT_CHECKS)
def test_timeout_and_errors(results, world, name):
    judge(results(world, "timeout"), world, "timeout", name)
