// One process's connection to spcolld for the c10d backend: the
// libspclient client, the lock that makes it one-thread-at-a-time (as
// spcoll.h requires), waits that do not hold that lock while they block,
// and the staging memory (spc_buffers) that ordinary tensors are copied
// through. Every backend of the process shares one Conn.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <sys/types.h>

extern "C" {
#include "spcoll.h"
}

namespace spcoll {

using Clock = std::chrono::steady_clock;

// Memory shared with the daemon, cut in blocks. Small blocks come from
// slabs by power-of-two class; large ones are whole buffers, kept for reuse
// up to kCacheBytes. fresh() runs under the Conn's lock (it registers a
// buffer); reuse() and put() may run on any thread (a tensor's deleter),
// so the free lists have a lock of their own, and buffers over the cache
// are freed by the next fresh(), never by put().
class Arena {
 public:
  struct Block {
    spc_buffer* buf = nullptr;
    uint64_t off = 0;
    size_t size = 0;  // bytes usable (the class size)
    void* data() const;
  };
  static constexpr size_t kSlabBytes = size_t(4) << 20;
  static constexpr size_t kLargeBytes = size_t(1) << 20;
  static constexpr size_t kCacheBytes = size_t(256) << 20;

  explicit Arena(spc_client* c) : c_(c) {}
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // A free block of at least n bytes, if one is kept (any thread).
  bool reuse(size_t n, Block* out);
  // A block from new memory (the client's lock held); throws
  // DistBackendError naming n and the library's message when the daemon
  // refuses the memory.
  Block fresh(size_t n);
  void put(const Block& b);
  // put() of the block starting at p; false when p is no block's start.
  bool put_addr(void* p);
  // The buffer holding [p, p + n) and the offset of p in it, when the
  // bytes lie in this arena's memory (a tensor made by empty()).
  bool locate(const void* p, size_t n, spc_buffer** buf, uint64_t* off);

 private:
  static int class_of(size_t n);
  void release_over_cache();

  spc_client* c_;
  std::mutex mu_;  // free lists and the buffer map (put() runs anywhere)
  std::map<uintptr_t, spc_buffer*> bufs_;  // every buffer, by address
  std::map<uintptr_t, size_t> block_size_;  // its blocks' size, by address
  std::vector<Block> small_[21];           // classes 2^8 .. 2^20
  std::multimap<size_t, Block> large_;     // cached whole buffers
  size_t cached_ = 0;
  std::vector<spc_buffer*> doomed_;        // to free at the next fresh()
};

class Conn {
 public:
  // Connects to the daemon at socket ("" for the default); throws
  // DistBackendError with libspclient's message.
  explicit Conn(const std::string& socket);
  ~Conn();
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;

  spc_client* client() const { return c_; }
  Arena& arena() { return *arena_; }
  // A block of at least n bytes of spcoll memory, from any thread not
  // holding the lock (it is taken when new memory must be registered).
  Arena::Block block(size_t n);
  pid_t pid() const { return pid_; }

  // What the backend did with the bytes of its ops' operands: read or
  // written in place (direct), copied into staging (in) or back out of it
  // (out); and allocations the CPU allocator could not place.
  struct Counts {
    std::atomic<uint64_t> direct{0}, staged_in{0}, staged_out{0};
    std::atomic<uint64_t> refused{0};
    std::atomic<uint64_t> wrapped{0};  // caller memory, spc_buffer_wrap
    // segments of torch's CUDA allocator registered, and released again
    // when torch gave them back to CUDA (cuda.hpp)
    std::atomic<uint64_t> segments{0}, segments_released{0};
    // allocations of spcoll's CUDA MemPool, and those given back
    std::atomic<uint64_t> pool_allocs{0}, pool_frees{0};
  };
  Counts& counts() { return counts_; }
  void count_refused(size_t n) { counts_.refused += n; }

  // The client's lock. Unlocking wakes a thread blocked in wait() on the
  // socket when the holder may have read the answer it waits for.
  class Lock {
   public:
    explicit Lock(Conn& c) : c_(c), l_(c.mu_) {}
    ~Lock();
    std::unique_lock<std::mutex>& raw() { return l_; }

   private:
    Conn& c_;
    std::unique_lock<std::mutex> l_;
  };

  // Complete *req (started on this client) without holding the lock while
  // blocked. Returns the op's status (*req is then NULL), or SPC_ETIMEDOUT
  // with *req still set when deadline passed first; *msg gets the
  // library's message of a failure.
  int wait(spc_request** req, Clock::time_point deadline, std::string* msg);

  // Non-blocking look at *req: 1 done (status in *status), 0 not yet.
  int test(spc_request** req, int* status, std::string* msg);

 private:
  void wake_pumper();
  // spc_client_set_wait_lock's hooks: this lock, released while an op
  // waits for other ranks (waking the waiters, as a Lock's end does).
  static void release_for_wait(void* arg);
  static void take_after_wait(void* arg);

  spc_client* c_ = nullptr;
  pid_t pid_;                   // the process that connected
  Counts counts_;
  std::unique_ptr<Arena> arena_;
  std::mutex mu_;
  std::condition_variable cv_;  // waiters not polling the socket
  bool pumping_ = false;        // one waiter polls the socket, unlocked
  int waiters_ = 0;
  int efd_ = -1;                // wakes the polling waiter
};

// "message (SPC_ENAME)" for a failed status.
std::string status_text(int status, const std::string& msg);

}  // namespace spcoll
