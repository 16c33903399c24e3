// Conn: the client, its lock, and waits that block without the lock.
//
// Waiting: one waiter at a time polls the socket with the lock released
// (the "pumper"); the others sleep on cv_. Any thread that used the client
// while a pumper polls may have read the pumper's answer, so unlocking
// writes the eventfd the pumper also polls. Whoever reads answers wakes the
// sleepers, which look at their own request again.
#include "conn.hpp"
#include "cuda.hpp"

extern "C" {
#include "status.h"
}

#include <errno.h>
#include <string.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <c10/util/Exception.h>

namespace spcoll {

// "SPC_E..." of a status, from the one status list.
static const char* status_name(int status) {
  switch (status) {
#define STATUS_CASE(name, pub, wire, val, msg) \
  case -(val):                                 \
    return "SPC_" #pub;
    SPK_STATUS_MAP(STATUS_CASE)
#undef STATUS_CASE
    default:
      return "SPC_E?";
  }
}

std::string status_text(int status, const std::string& msg) {
  std::string s = msg.empty() ? spc_strerror(status) : msg;
  return s + " (" + status_name(status) + ")";
}

Conn::Conn(const std::string& socket) {
  int rc = spc_connect(socket.empty() ? nullptr : socket.c_str(), "torch-c10d",
                       &c_);
  if (rc < 0)
    C10_THROW_ERROR(DistBackendError,
                    "spcoll: connect to spcolld at " +
                        (socket.empty() ? std::string("the default socket")
                                        : socket) +
                        ": " + status_text(rc, spc_last_error(nullptr)));
  efd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (efd_ < 0) {
    int e = errno;
    spc_disconnect(c_);
    C10_THROW_ERROR(DistBackendError,
                    std::string("spcoll: eventfd for the waiters failed: ") +
                        strerror(e));
  }
  arena_ = std::make_unique<Arena>(c_);
  pid_ = getpid();
  // Ops waiting for other ranks let the other threads in (queue.hpp).
  (void)spc_client_set_wait_lock(c_, release_for_wait, take_after_wait, this);
}

// Called by libspclient on the thread holding the lock (a Lock of ours).
void Conn::release_for_wait(void* arg) {
  Conn* k = static_cast<Conn*>(arg);
  if (k->pumping_)
    k->wake_pumper();
  if (k->waiters_ > 0)
    k->cv_.notify_all();
  k->mu_.unlock();
}

void Conn::take_after_wait(void* arg) {
  static_cast<Conn*>(arg)->mu_.lock();
}

Arena::Block Conn::block(size_t n) {
  Arena::Block b;
  if (arena_->reuse(n, &b))
    return b;
  Lock l(*this);
  return arena_->fresh(n);
}

Conn::~Conn() {
  cuda_forget(this);  // torch's CUDA segments, released before it frees them
  arena_.reset();  // unregisters the staging buffers first
  spc_disconnect(c_);
  if (efd_ >= 0)
    close(efd_);
}

Conn::Lock::~Lock() {
  if (c_.pumping_)
    c_.wake_pumper();
  if (c_.waiters_ > 0)
    c_.cv_.notify_all();
}

void Conn::wake_pumper() {
  uint64_t one = 1;
  // EAGAIN: the counter is already non-zero, the pumper will wake anyway.
  while (write(efd_, &one, sizeof one) < 0 && errno == EINTR) {
  }
}

int Conn::test(spc_request** req, int* status, std::string* msg) {
  Lock l(*this);
  int done = 0;
  int rc = spc_test(req, &done);
  if (!done && rc == SPC_OK)
    return 0;
  *status = rc;
  if (rc < 0 && msg != nullptr)
    *msg = spc_last_error(c_);
  return 1;
}

// Poll the socket and the eventfd until one is readable or the deadline.
static void poll_once(int fd, int efd, Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                  deadline - Clock::now())
                  .count();
  // Bounded so that a lost wake-up costs a millisecond, not a hang.
  int ms = left < 0 ? 0 : (left > 100 ? 100 : (int)left + 1);
  struct pollfd p[2] = {{fd, POLLIN, 0}, {efd, POLLIN, 0}};
  if (poll(p, 2, ms) > 0 && (p[1].revents & POLLIN)) {
    uint64_t v;
    while (read(efd, &v, sizeof v) < 0 && errno == EINTR) {
    }
  }
}

int Conn::wait(spc_request** req, Clock::time_point deadline,
               std::string* msg) {
  Lock l(*this);
  waiters_++;
  int rc = SPC_ETIMEDOUT;
  for (;;) {
    int done = 0;
    rc = spc_test(req, &done);
    if (done || rc < 0) {
      if (rc < 0 && msg != nullptr)
        *msg = spc_last_error(c_);
      break;
    }
    if (Clock::now() >= deadline) {
      rc = SPC_ETIMEDOUT;
      break;
    }
    if (!pumping_) {
      pumping_ = true;
      l.raw().unlock();
      poll_once(spc_client_fd(c_), efd_, deadline);
      l.raw().lock();
      pumping_ = false;
      cv_.notify_all();  // a sleeper may take the socket, or its answer
    } else {
      cv_.wait_until(l.raw(), deadline);
    }
  }
  waiters_--;
  return rc;
}

}  // namespace spcoll
