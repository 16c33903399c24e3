// Flight: see flight.hpp.
#include "flight.hpp"

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <algorithm>
#include <cstdlib>

#ifdef SPC_FLIGHT
#include <torch/csrc/distributed/c10d/FlightRecorderDetail.hpp>
#endif

namespace spcoll {

namespace {

// torch's rule (distributed_c10d._maybe_attach_flight_recorder): the
// first of these set wins; 2000 entries if neither is; 0 is off.
bool recorder_wanted() {
  for (const char* v : {"TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"}) {
    const char* s = std::getenv(v);
    if (s != nullptr && *s != '\0')
      return std::atoll(s) > 0;
  }
  return true;
}

}  // namespace

bool Flight::records() {
#ifdef SPC_FLIGHT
  return true;
#else
  return false;
#endif
}

Flight::Flight(size_t pg_id, std::vector<uint64_t> ranks)
    : pg_id_(pg_id), ranks_(std::move(ranks)) {
#ifdef SPC_FLIGHT
  auto* fr = c10d::getFlightRecorder("spcoll");
  if (fr != nullptr && fr->enabled_ && recorder_wanted()) {
    fr_ = fr;
    status_ = std::make_shared<c10d::ProcessGroupStatus>();
  }
#endif
}

FlightMark Flight::begin(const c10d::Backend& b, const char* op,
                         const std::vector<at::Tensor>& in,
                         const std::vector<at::Tensor>& out, bool p2p,
                         std::chrono::milliseconds timeout) {
  FlightMark m;
#ifdef SPC_FLIGHT
  if (fr_ == nullptr)
    return m;
  size_t seq, p2p_seq, op_id;
  {
    // torch names the group after making its backend: the name is taken
    // at the first op, and the group's ranks recorded under it then
    std::lock_guard<std::mutex> l(mu_);
    if (std::get<0>(name_).empty()) {
      name_ = {b.getGroupUid(), b.getGroupDesc()};
      fr_->record_pg_ranks(name_, ranks_);
    }
    seq = p2p ? seq_ : ++seq_;
    p2p_seq = p2p ? ++p2p_seq_ : p2p_seq_;
    op_id = ++op_id_;
    if (!p2p) {
      status_->lastEnqueuedSeq = (int64_t)seq;
      status_->lastEnqueuedWorkName = op;
    }
  }
  auto r = fr_->recordWithResetEnabled(
      pg_id_, name_, seq, p2p_seq, op_id, std::string("spcoll:") + op, in, out,
      nullptr, nullptr, timeout, status_, p2p);
  m.fr = fr_;
  m.status = status_.get();
  m.seq = p2p ? -1 : (int64_t)seq;
  m.id = r.id;
  m.epoch = r.reset_epoch;
  m.t0 = std::chrono::steady_clock::now();
#else
  (void)b, (void)op, (void)in, (void)out, (void)p2p, (void)timeout;
#endif
  return m;
}

void FlightMark::done() {
#ifdef SPC_FLIGHT
  if (fr == nullptr || !id)
    return;
  std::chrono::duration<float, std::milli> d =
      std::chrono::steady_clock::now() - t0;
  fr->retire_completed(id, epoch, d.count());
  id.reset();  // once
  if (seq >= 0 && seq > status->lastCompletedSeq) {
    status->lastStartedSeq = std::max(status->lastStartedSeq, seq);
    status->lastCompletedSeq = seq;
  }
#endif
}

}  // namespace spcoll
