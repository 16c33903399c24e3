// c10d::Backend "spcoll": torch.distributed's collectives and P2P on a
// group of spcolld, through libspclient. A thin layer: each torch op is
// one spcoll op on flat views of the caller's tensors (or, for tensors
// outside spcoll memory, of a staged copy), plus the local step that puts
// the result where torch wants it.
//
// Blocking calls (torch's asyncOp false) run with spc_run: through the
// group's shared segment when the op fits it, without the daemon. Async
// calls on CPU tensors run with spc_run too, on the group's queue
// (queue.hpp), and complete later (work.hpp), so they overlap with
// whatever the caller does meanwhile; every other call of the group
// waits for the queue first, so the group's ops keep the caller's order.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "conn.hpp"
#include "cuda.hpp"
#include "flight.hpp"
#include "queue.hpp"
#include "work.hpp"

namespace spcoll {

class Device;

// Where an op's flat operand lies: in a registered buffer, nbytes long.
struct Span {
  spc_buffer* buf = nullptr;
  uint64_t off = 0;
  char* data = nullptr;
  int64_t bytes = 0;
  bool wrapped = false;  // caller memory (spc_buffer_wrap)
  int dev = -1;          // the CUDA device of device memory; -1: host
};

// How a torch reduction runs: on the daemon (red), or as an all-gather
// and a local fold (local); moved as dtype `move` (bool as uint8); AVG
// divides after a sum; PREMUL_SUM multiplies before one.
struct RedPlan {
  bool local = false;
  spc_reduce_op red = SPC_SUM;
  c10d::ReduceOp::RedOpType fold = c10d::ReduceOp::SUM;
  at::ScalarType move = at::kFloat;
  spc_dtype wire = SPC_FLOAT32;
  bool avg = false;
  c10::intrusive_ptr<c10d::_SupplementBase> premul;
  int dev = -1;  // where AVG divides: the op's CUDA device, -1 the host
};

class Backend final : public c10d::Backend {
 public:
  // Joins spcoll group `name` as rank of size (blocks until every rank has
  // joined); timeout bounds every op (the daemon's op timeout for the
  // group, and wait() here). pg_id and ranks (the members' global ranks)
  // name the group in torch's FlightRecorder (flight.hpp).
  Backend(std::shared_ptr<Conn> conn, const std::string& name, int rank,
          int size, std::chrono::milliseconds timeout, size_t pg_id,
          std::vector<uint64_t> ranks);
  // Where CUDA tensors go (device.hpp); without one they are refused.
  void set_device(std::shared_ptr<Device> d) { device_ = std::move(d); }
  ~Backend() override;

  const std::string getBackendName() const override { return "spcoll"; }
  const std::string& spcoll_name() const { return name_; }
  // destroy_process_group: the queued ops run first, then the group is
  // left. abort (and an op that broke the group, lost): ops not yet run
  // fail, and the group is left without waiting for the one running.
  void shutdown() override;
  void abort() override;
  void setTimeout(std::chrono::milliseconds t) override { timeout_ = t; }

  // reductions (backend_reduce.cpp)
  c10::intrusive_ptr<c10d::Work> allreduce(
      std::vector<at::Tensor>& ts, const c10d::AllreduceOptions& o) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& ts,
      const c10d::AllreduceCoalescedOptions& o) override;
  c10::intrusive_ptr<c10d::Work> reduce(
      std::vector<at::Tensor>& ts, const c10d::ReduceOptions& o) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outs, std::vector<std::vector<at::Tensor>>& ins,
      const c10d::ReduceScatterOptions& o) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& out, at::Tensor& in,
      const c10d::ReduceScatterOptions& o) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outs, std::vector<at::Tensor>& ins,
      const c10d::ReduceScatterOptions& o) override;

  // moves (backend_move.cpp)
  c10::intrusive_ptr<c10d::Work> broadcast(
      std::vector<at::Tensor>& ts, const c10d::BroadcastOptions& o) override;
  c10::intrusive_ptr<c10d::Work> allgather(
      std::vector<std::vector<at::Tensor>>& outs, std::vector<at::Tensor>& ins,
      const c10d::AllgatherOptions& o) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(
      at::Tensor& out, at::Tensor& in,
      const c10d::AllgatherOptions& o) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outs, std::vector<at::Tensor>& ins,
      const c10d::AllgatherOptions& o) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outs, std::vector<at::Tensor>& ins,
      const c10d::AllgatherOptions& o) override;
  c10::intrusive_ptr<c10d::Work> gather(
      std::vector<std::vector<at::Tensor>>& outs, std::vector<at::Tensor>& ins,
      const c10d::GatherOptions& o) override;
  c10::intrusive_ptr<c10d::Work> scatter(
      std::vector<at::Tensor>& outs, std::vector<std::vector<at::Tensor>>& ins,
      const c10d::ScatterOptions& o) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(
      at::Tensor& out, at::Tensor& in, std::vector<int64_t>& out_splits,
      std::vector<int64_t>& in_splits,
      const c10d::AllToAllOptions& o) override;
  c10::intrusive_ptr<c10d::Work> alltoall(
      std::vector<at::Tensor>& outs, std::vector<at::Tensor>& ins,
      const c10d::AllToAllOptions& o) override;
  c10::intrusive_ptr<c10d::Work> barrier(
      const c10d::BarrierOptions& o) override;

  // point to point (backend.cpp)
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& ts, int dst,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& ts, int src,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& ts,
                                               int tag) override;

  // ---- for the op files ----
  // One spcoll op, run (blocking) or started (async) on flat x -> y of n
  // elements of dtype dt each; p holds what the op needs until it is over.
  struct Op {
    const char* name;
    c10d::OpType type;
    spc_op op;
    spc_dtype dt;
    Span x, y;
    std::unique_ptr<Pending> p;
  };
  c10::intrusive_ptr<c10d::Work> run(Op op, bool async,
                                     std::chrono::milliseconds timeout);

  // Where an op's tensors are: -1 all on the CPU, the CUDA device when all
  // are on one GPU; ValueError naming the op when they mix. *direct:
  // whether its CUDA tensors run here (cuda.hpp) rather than on the Python
  // backend's device path: torch's allocator (unless SPCOLL_CUDA_DIRECT=0),
  // or every tensor in spcoll's pool, on every rank (agree_direct).
  int place(const char* name, const std::vector<const at::Tensor*>& ts,
            bool* direct);

  // The caller's tensor as op memory: in place when it is contiguous in
  // spcoll memory or in a segment of torch's CUDA allocator, or as caller
  // memory in an op run with spc_run (p.may_wrap, wrap), else a staged
  // copy.
  // Staging and scratch are on p.dev (host memory when it is -1).
  Span in_span(const at::Tensor& t, Pending& p);
  // Op memory the result lands in: the tensor itself when it is
  // contiguous in spcoll memory (*back false), else scratch to copy back.
  Span out_span(const at::Tensor& t, Pending& p, bool* back);
  Span scratch(int64_t bytes, Pending& p);
  bool in_place(const at::Tensor& t, Pending& p, Span* s);
  bool wrap(const at::Tensor& t, Pending& p, Span* s);
  // The Pending of a collective; may_wrap: its tensors may be caller
  // memory (not where the op changes its staged input first: PREMUL_SUM).
  static std::unique_ptr<Pending> pending(bool may_wrap) {
    auto p = std::make_unique<Pending>();
    p->may_wrap = may_wrap;
    return p;
  }

  // The op `op`, issued now, in torch's FlightRecorder: its Pending's
  // mark, done when it completes; issued(): the mark of an op handed to
  // the Python backend (device.hpp), done as it is issued, since its
  // Work is not this backend's.
  FlightMark record(const char* op, const std::vector<at::Tensor>& in,
                    const std::vector<at::Tensor>& out,
                    std::chrono::milliseconds timeout, bool p2p = false) {
    return flight_.begin(*this, op, in, out, p2p, timeout_of(timeout));
  }
  static c10::intrusive_ptr<c10d::Work> issued(
      FlightMark m, c10::intrusive_ptr<c10d::Work> w) {
    m.done();
    return w;
  }

  // A bad argument found here, before the op reached the daemon: fail
  // the op on every other rank too (they wait for this rank's op), then
  // throw ValueError naming it.
  [[noreturn]] void refuse(const char* name, const std::string& why);
  void check_live(const char* name) const;
  RedPlan plan_reduce(const char* name, const c10d::ReduceOp& op,
                      at::ScalarType dt);
  std::chrono::milliseconds timeout_of(std::chrono::milliseconds t) const {
    return t.count() < 0 ? timeout_ : t;
  }
  int rank() const { return rank_; }
  int size() const { return size_; }
  std::shared_ptr<Conn>& conn() { return conn_; }
  Device* device(const char* name) const;  // throws without one

 private:
  c10::intrusive_ptr<c10d::Work> p2p(bool send, at::Tensor& t, int peer,
                                     int tag);
  c10::intrusive_ptr<c10d::Work> run_device(Op& o, bool async);
  c10::intrusive_ptr<c10d::Work> run_queued(Op& o,
                                            std::chrono::milliseconds timeout);
  // Why the group may not be used; "" while it may.
  std::string broken_why() const;
  bool agree_direct(const char* name, bool mine);
  int min_over_ranks(const char* name, int v);
  void finish_sync(Op& o, int rc, const std::string& msg);
  void lost(const std::string& why);
  void mark_broken(const std::string& why);
  void leave();
  void leave_soon();
  void attach(Work& w);
  int locked(const std::function<int(spc_group*)>& f, std::string* msg);

  std::shared_ptr<Conn> conn_;
  std::shared_ptr<Progress> progress_;
  std::shared_ptr<Device> device_;
  std::string name_;
  std::chrono::milliseconds timeout_;
  spc_group* g_ = nullptr;
  mutable std::mutex state_mu_;
  std::string broken_;  // why the group may not be used; "" while usable
  int all_direct_ = -1;  // every rank's cuda_direct(): 1, 0; -1 not asked
  Flight flight_;
  OpQueue queue_;  // last: its thread ends before the rest goes
};

// torch dtype -> spcoll dtype; throws TypeError naming an unsupported one
// (try_: false instead).
spc_dtype wire_dtype(const char* name, at::ScalarType t);
bool try_wire_dtype(at::ScalarType t, spc_dtype* dt);
// The tensors of an op's lists, for Backend::place.
std::vector<const at::Tensor*> all_of(
    std::initializer_list<const std::vector<at::Tensor>*> lists);
// Contiguous bytes <-> a tensor of any strides (device addresses for a
// CUDA tensor).
void copy_to_tensor(const at::Tensor& dst, const void* src);
void copy_from_tensor(void* dst, const at::Tensor& src);
spc_tensor flat_tensor(const Span& s, spc_dtype dt);
// Consecutive pieces of src into dsts, in order; the bytes of a list.
void copy_pieces(const char* src, const std::vector<at::Tensor>& dsts);
int64_t bytes_of(const std::vector<at::Tensor>& ts);
// The tensors of a list of lists, in order.
std::vector<at::Tensor> flat(const std::vector<std::vector<at::Tensor>>& ls);

}  // namespace spcoll
