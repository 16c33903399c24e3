"""torch's FlightRecorder under the C++ backend (flight_ranks.py): every
op recorded once, by the backend, with its sizes; completed ops read
"completed", a failed one "scheduled"; a group made with the recorder
off records nothing. torch 2.x with the C++ backend only."""
import os

import pytest

import flight_ranks
import launch


def test_ops_are_recorded_by_the_backend(daemon, workdir):
    from spcoll import c10d
    if c10d.load() is None:
        pytest.skip("no C++ backend here (%s)" % c10d.why_not())
    if not c10d.records_flight():
        pytest.skip("this torch's FlightRecorder cannot be fed from an "
                    "extension (flight.hpp): torch's hook records instead")
    world = 2
    d = os.path.join(workdir, "flight")
    res = launch.run_ranks(world, flight_ranks.run,
                           (daemon, os.path.join(d, "store")), d, guard=120)
    for r, x in enumerate(res):
        assert "__error__" not in x, x["__error__"]
        assert x["hooks"] == 0, (r, x["hooks"])
        assert x["bad"] and "all_gather_into_tensor" in x["bad"], (r, x)
        got = [(e["profiling_name"], e["state"], e["process_group"][0],
                e["collective_seq_id"], e["p2p_seq_id"])
               for e in x["entries"]]
        p2p = "spcoll:send" if r == 0 else "spcoll:recv"
        want = [("spcoll:all_reduce", "completed", "0", 1, 0),
                ("spcoll:all_gather_into_tensor", "completed", "0", 2, 0),
                ("spcoll:all_reduce", "completed", "0", 3, 0),
                (p2p, "completed", "0", 3, 1),
                ("spcoll:all_gather_into_tensor", "scheduled", "0", 4, 1),
                ("spcoll:all_reduce", "completed", "1", 1, 0)]
        assert got == want, (r, got)
        first, gather = x["entries"][0], x["entries"][1]
        assert first["input_sizes"] == [[4]] and first["output_sizes"] == [[4]]
        assert gather["output_sizes"] == [[4 * world]], gather
        assert x["entries"][3]["is_p2p"]
        assert x["config"]["0"]["ranks"] == "[0, 1]", x["config"]
        assert x["config"]["1"]["ranks"] == "[0, 1]", x["config"]
        assert x["status"]["0"]["last_enqueued_collective"] == 4, x["status"]
        assert x["status"]["0"]["last_completed_collective"] == 3, x["status"]
