"""The opt-in CPU allocator of the C++ backend (spcoll.c10d): ops on
tensors made after it is on stage nothing and equal gloo; a tensor made
before is staged (allocator_ranks.py). torch 2.x only: the Python backend
of torch 1.13 has no allocator."""
import os

import pytest

import allocator_ranks
import launch


def test_tensors_after_the_allocator_go_in_place(daemon, workdir):
    from spcoll import c10d
    if c10d.load() is None:
        pytest.skip("no C++ backend here (%s): the allocator is part of it"
                    % c10d.why_not())
    for world in (2, 3):
        d = os.path.join(workdir, "allocator-w%d" % world)
        res = launch.run_ranks(world, allocator_ranks.run,
                               (daemon, os.path.join(d, "store")), d,
                               guard=200)
        for r, x in enumerate(res):
            assert "__error__" not in x, x["__error__"]
            assert not x["bad"], (world, r, x["bad"])
            assert x["staged_new"] == 0, (world, r, x)
            assert x["direct_new"] > 0, (world, r, x)
            assert x["staged_old"] == 2 * 4000, (world, r, x)
