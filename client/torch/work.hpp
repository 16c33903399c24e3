// The Work of one async spcoll op (a blocking one returns none, see
// Backend::run): it holds the daemon's request and completes on wait(), on
// isCompleted(), or on the backend's progress thread once its future was
// asked for; or it is an op of the backend's queue, which completes it.
// Never on a Python thread, never with the GIL.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "conn.hpp"
#include "flight.hpp"

namespace spcoll {

class Progress;

// A block of staging memory, returned to the arena when dropped.
struct Staged {
  Staged(std::shared_ptr<Conn> c, Arena::Block b) : conn(std::move(c)), blk(b) {}
  ~Staged() { conn->arena().put(blk); }
  Staged(const Staged&) = delete;
  Staged& operator=(const Staged&) = delete;
  std::shared_ptr<Conn> conn;
  Arena::Block blk;
};

// A record of caller memory (spc_buffer_wrap) over a tensor of a blocking
// op, freed when dropped: under the client's lock, as it is unlinked from
// the client's buffers.
struct Wrapped {
  Wrapped(std::shared_ptr<Conn> c, spc_buffer* b) : conn(std::move(c)), buf(b) {}
  ~Wrapped() {
    Conn::Lock l(*conn);
    (void)spc_buffer_free(buf);  // frees a record: it cannot fail
  }
  Wrapped(const Wrapped&) = delete;
  Wrapped& operator=(const Wrapped&) = delete;
  std::shared_ptr<Conn> conn;
  spc_buffer* buf;
};

// What an op holds until it is over: the memory the daemon may still
// touch, the local step that runs once after success (copy back, a local
// reduction), and what result() returns.
struct Pending {
  // Run with spc_run (a blocking collective, or an async one on the
  // backend's queue): its tensors may be passed as caller memory.
  bool may_wrap = false;
  int dev = -1;  // the op's CUDA device (its staging is there); -1: host
  std::vector<std::unique_ptr<Wrapped>> wrapped;
  std::vector<std::unique_ptr<Staged>> staged;
  std::vector<at::Tensor> keep;  // caller tensors the daemon reads or writes
  std::function<void()> finish;
  std::vector<at::Tensor> outputs;
  bool nested = false;  // the future holds [outputs] (a list of lists)
  int source = -1;  // a receive's source, set when it completes
  FlightMark flight;  // its FlightRecorder entry, done when it succeeds
};

class Work : public c10d::Work {
 public:
  // name: "all_reduce", ...; timeout: the default bound of wait(). The
  // on_lost callback hears why the group can no longer be used: a wait
  // gave up on a request the daemon may still answer, or the op failed in
  // a way that broke the group (timeout, lost rank or node, abort).
  Work(std::shared_ptr<Conn> conn, int rank, c10d::OpType type,
       const char* name, std::chrono::milliseconds timeout,
       std::unique_ptr<Pending> p);
  ~Work() override;

  void start_failed(int status, const std::string& msg);
  void set_request(spc_request* r) { req_ = r; }
  // An op run by the backend's queue (queue.hpp), which completes it with
  // finish_queued: wait() and the future wait for that.
  void set_queued() { queued_ = true; }
  void finish_queued(int status, const std::string& msg);
  void set_on_lost(std::function<void(const std::string&)> f) { lost_ = std::move(f); }
  void set_progress(std::shared_ptr<Progress> p) { progress_ = std::move(p); }
  int* source_slot() { return &p_->source; }

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  int sourceRank() const override;
  std::vector<at::Tensor> result() override;
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  void synchronize() override {}
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  std::chrono::milliseconds getTimeout() const override { return timeout_; }

 private:
  void complete(int status, const std::string& msg);
  void publish();  // the future, after completion, outside mutex_

  std::shared_ptr<Conn> conn_;
  const char* name_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<Pending> p_;
  spc_request* req_ = nullptr;
  bool driving_ = false;  // one thread at a time completes req_
  bool queued_ = false;   // completed by the queue, not through req_
  int source_ = -1;
  std::function<void(const std::string&)> lost_;
  std::shared_ptr<Progress> progress_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  bool published_ = false;
};

// Completes the futures of async Works in issue order on one thread of
// its own, started when the first future is asked for.
class Progress {
 public:
  ~Progress();
  void watch(c10::intrusive_ptr<Work> w);

 private:
  void loop();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<c10::intrusive_ptr<Work>> q_;
  bool stop_ = false;
  std::thread t_;
};

// The exception torch raises for a failed op: ValueError for a bad
// argument (SPC_EINVAL), DistBackendError otherwise; a timeout says
// "Timed out". The message is the daemon's, after the op's name.
std::exception_ptr op_error(const char* name, int status, const std::string& msg);

// Whether a failed op left its group broken in the daemon (timeout, a
// lost rank or node, an operator's abort): later ops are refused here.
bool breaks_group(int status);

}  // namespace spcoll
