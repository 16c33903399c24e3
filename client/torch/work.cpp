// Work and Progress (see work.hpp).
#include "work.hpp"

#include <c10/util/Exception.h>

namespace spcoll {

bool breaks_group(int status) {
  return status == SPC_ETIMEDOUT || status == SPC_EPEERLOST ||
         status == SPC_ENODELOST || status == SPC_EABORTED;
}

std::exception_ptr op_error(const char* name, int status,
                            const std::string& msg) {
  std::string m = std::string("spcoll: ") + name + ": ";
  if (status == SPC_ETIMEDOUT)
    m += "Timed out: ";
  m += status_text(status, msg);
  try {
    if (status == SPC_EINVAL)
      C10_THROW_ERROR(ValueError, m);
    C10_THROW_ERROR(DistBackendError, m);
  } catch (...) {
    return std::current_exception();
  }
}

Work::Work(std::shared_ptr<Conn> conn, int rank, c10d::OpType type,
           const char* name, std::chrono::milliseconds timeout,
           std::unique_ptr<Pending> p)
    : c10d::Work(rank, type),
      conn_(std::move(conn)),
      name_(name),
      timeout_(timeout),
      p_(std::move(p)) {}

Work::~Work() {
  // A request still pending was given up on (lost): its staging must
  // outlive any write the daemon may still make, so it is kept.
  if (req_ != nullptr)
    (void)p_.release();
}

void Work::start_failed(int status, const std::string& msg) {
  p_->finish = nullptr;
  complete(status, msg);
}

// Runs the local step, then records the outcome. Called by the one thread
// that completed the request (driving_), or at issue.
void Work::complete(int status, const std::string& msg) {
  std::exception_ptr err;
  if (status < 0) {
    err = op_error(name_, status, msg);
    // the daemon broke the group: later ops are refused here, naming why
    if (lost_ && breaks_group(status))
      lost_(std::string(name_) + ": " + status_text(status, msg));
  } else if (p_->finish) {
    try {
      p_->finish();
    } catch (...) {
      err = std::current_exception();
    }
  }
  if (!err)
    p_->flight.done();
  {
    std::lock_guard<std::mutex> l(mutex_);
    source_ = p_->source;
    p_->finish = nullptr;
    p_->staged.clear();
    p_->keep.clear();
    exception_ = err;
    completed_ = true;
  }
  cv_.notify_all();
}

void Work::finish_queued(int status, const std::string& msg) {
  complete(status, msg);
  publish();
}

bool Work::isCompleted() {
  {
    std::lock_guard<std::mutex> l(mutex_);
    if (completed_ || driving_ || req_ == nullptr)
      return completed_;
    driving_ = true;
  }
  int status = 0;
  std::string msg;
  int done = conn_->test(&req_, &status, &msg);
  if (done)
    complete(status, msg);
  {
    std::lock_guard<std::mutex> l(mutex_);
    driving_ = false;
  }
  cv_.notify_all();
  if (done)
    publish();
  return done != 0;
}

bool Work::isSuccess() const {
  std::lock_guard<std::mutex> l(mutex_);
  return completed_ && !exception_;
}

std::exception_ptr Work::exception() const {
  std::lock_guard<std::mutex> l(mutex_);
  return exception_;
}

int Work::sourceRank() const {
  std::lock_guard<std::mutex> l(mutex_);
  TORCH_CHECK(completed_ && !exception_ && source_ >= 0,
              "spcoll: sourceRank() of a Work that is not a completed receive");
  return source_;
}

std::vector<at::Tensor> Work::result() {
  return p_ ? p_->outputs : std::vector<at::Tensor>{};
}

// Without a bound of the caller's, a wait gives the daemon kGrace past the
// group's op timeout: the daemon then fails the op on every rank, naming
// the ranks that never issued it, before this wait gives up on it (which
// leaves the group, and the others would hear only "left").
static constexpr std::chrono::milliseconds kGrace{5000};

bool Work::wait(std::chrono::milliseconds timeout) {
  auto t = timeout == kNoTimeout ? timeout_ + kGrace : timeout;
  auto deadline = Clock::now() + t;
  std::unique_lock<std::mutex> l(mutex_);
  while (!completed_) {
    if (driving_ || queued_) {
      if (cv_.wait_until(l, deadline) == std::cv_status::timeout && !completed_)
        break;
      continue;
    }
    if (req_ == nullptr || Clock::now() >= deadline)
      break;
    driving_ = true;
    l.unlock();
    std::string msg;
    int status = conn_->wait(&req_, deadline, &msg);
    bool done = req_ == nullptr;
    if (done)
      complete(status, msg);
    l.lock();
    driving_ = false;
    cv_.notify_all();
    if (done) {
      l.unlock();
      publish();
      l.lock();
    }
  }
  if (!completed_) {
    l.unlock();
    std::string why = "no answer within " + std::to_string(t.count()) +
                      " ms (a rank did not issue the op, or is stuck)";
    if (lost_)
      lost_(std::string(name_) + ": " + why);
    auto err = op_error(name_, SPC_ETIMEDOUT, why);
    c10::intrusive_ptr<c10::ivalue::Future> f;
    {
      std::lock_guard<std::mutex> g(mutex_);
      if (future_ && !published_) {
        published_ = true;
        f = future_;
      }
    }
    if (f)
      f->setError(err);
    std::rethrow_exception(err);
  }
  if (exception_)
    std::rethrow_exception(exception_);
  return true;
}

// Marks the future once, after the op completed.
void Work::publish() {
  c10::intrusive_ptr<c10::ivalue::Future> f;
  std::exception_ptr err;
  {
    std::lock_guard<std::mutex> l(mutex_);
    if (!completed_ || !future_ || published_)
      return;
    published_ = true;
    f = future_;
    err = exception_;
  }
  if (err)
    f->setError(err);
  else if (p_->nested)
    f->markCompleted(c10::IValue(std::vector<std::vector<at::Tensor>>{p_->outputs}));
  else
    f->markCompleted(c10::IValue(p_->outputs));
}

c10::intrusive_ptr<c10::ivalue::Future> Work::getFuture() {
  bool watch = false;
  {
    std::lock_guard<std::mutex> l(mutex_);
    if (!future_) {
      auto list = c10::ListType::create(c10::TensorType::get());
      future_ = c10::make_intrusive<c10::ivalue::Future>(
          p_->nested ? c10::ListType::create(list) : list);
      watch = !completed_ && !queued_;  // the queue publishes its own
    }
  }
  if (watch && progress_)
    progress_->watch(c10::intrusive_ptr<Work>::reclaim_copy(this));
  else
    publish();
  return future_;
}

Progress::~Progress() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (t_.joinable())
    t_.join();
}

void Progress::watch(c10::intrusive_ptr<Work> w) {
  std::lock_guard<std::mutex> l(mu_);
  q_.push_back(std::move(w));
  if (!t_.joinable())
    t_ = std::thread([this] { loop(); });
  cv_.notify_one();
}

void Progress::loop() {
  for (;;) {
    c10::intrusive_ptr<Work> w;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [this] { return stop_ || !q_.empty(); });
      if (q_.empty())
        return;
      w = std::move(q_.front());
      q_.pop_front();
    }
    try {
      w->wait();  // completes the future, with the op's error if it failed
    } catch (...) {
    }
  }
}

}  // namespace spcoll
