// torch's FlightRecorder, fed by the backend itself, as gloo feeds its
// own: an op is recorded when it is issued and retired when it completes,
// into the recorder torch keeps for backend "spcoll" (getFlightRecorder),
// so torch's dump APIs and its trace analyzer read spcoll's ops. torch is
// told (spcoll/c10d.py), and attaches none of its recording hooks to
// spcoll's groups: a hook costs more per op than recording here.
//
// Where this torch lacks what recording needs (its recorder's template
// code, or the nlohmann/json header that code includes), nothing is
// recorded here and records() says so: torch's hook then records.
#pragma once

#include <ATen/ATen.h>

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#if __has_include(<torch/csrc/distributed/c10d/FlightRecorderDetail.hpp>) && \
    __has_include(<nlohmann/json.hpp>)
#define SPC_FLIGHT 1
#include <torch/csrc/distributed/c10d/FlightRecorder.hpp>
#endif

namespace c10d {
class Backend;
}

namespace spcoll {

// One op's entry; empty where nothing was recorded.
struct FlightMark {
#ifdef SPC_FLIGHT
  c10d::FlightRecorder<c10::Event>* fr = nullptr;
  // the group's status in the recorder, which keeps it for good
  c10d::ProcessGroupStatus* status = nullptr;
#endif
  int64_t seq = -1;  // a collective's sequence number; -1: P2P
  std::optional<size_t> id, epoch;
  std::chrono::steady_clock::time_point t0;
  // The op completed: its entry reads "completed", with its duration. An
  // op that failed is not marked: it reads "scheduled", as a hung one.
  void done();
};

class Flight {
 public:
  // Whether this build records natively.
  static bool records();
  // pg_id: the number of the group in dumps; ranks: its members' global
  // ranks by group rank. Off where torch's recorder is (its buffer size 0,
  // read from the environment now, as torch decides per group).
  Flight(size_t pg_id, std::vector<uint64_t> ranks);
  // The op `op` ("all_reduce") of backend b, issued now.
  FlightMark begin(const c10d::Backend& b, const char* op,
                   const std::vector<at::Tensor>& in,
                   const std::vector<at::Tensor>& out, bool p2p,
                   std::chrono::milliseconds timeout);

 private:
#ifdef SPC_FLIGHT
  c10d::FlightRecorder<c10::Event>* fr_ = nullptr;
  std::shared_ptr<c10d::ProcessGroupStatus> status_;
#endif
  size_t pg_id_;
  std::vector<uint64_t> ranks_;
  std::mutex mu_;  // the counters and the name, for ops of several threads
  std::tuple<std::string, std::string> name_;
  size_t seq_ = 0, p2p_seq_ = 0, op_id_ = 0;
};

}  // namespace spcoll
