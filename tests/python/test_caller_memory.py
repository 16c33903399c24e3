"""Ordinary tensors through the C++ backend without a copy
(caller_memory_ranks.py): blocking collectives hand them to libspclient
as caller memory, which the other ranks read in this process; results
equal gloo's, nothing is staged; async ops too, on the group's queue,
also two groups' issued in crossed orders. torch 2.x
only: the Python backend of torch 1.13 stages every tensor outside
spcoll memory."""
import os

import pytest

import caller_memory_ranks
import launch


def test_blocking_collectives_take_caller_memory(daemon, workdir):
    from spcoll import c10d
    if c10d.load() is None:
        pytest.skip("no C++ backend here (%s): caller memory is its path"
                    % c10d.why_not())
    for world in (2, 4):
        d = os.path.join(workdir, "caller-memory-w%d" % world)
        res = launch.run_ranks(world, caller_memory_ranks.run,
                               (daemon, os.path.join(d, "store")), d,
                               guard=240)
        for r, x in enumerate(res):
            assert "__error__" not in x, x["__error__"]
            assert not x["bad"], (world, r, x["bad"])
            assert x["staged"] == [0, 0], (world, r, x["staged"])
            assert all(w > 0 for w in x["wrapped"]), (world, r, x)
            assert x["async_staged"] == 0 and x["async_wrapped"] > 0, \
                (world, r, x)
