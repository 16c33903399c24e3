// A torch CUDA MemPool backed by spcoll device memory (cuda.hpp): the
// pluggable allocator's two entry points, the table of what they gave
// out, and an op's scratch routed into the pool.
//
// torch.cuda.CUDAPluggableAllocator calls the entry points with no
// context of their own, so the connection they allocate through is the
// process's (cuda_pool_use): one spcoll connection per process, as every
// backend of the process shares one Conn.
#include "cuda.hpp"

#include "backend.hpp"

#ifdef SPC_TORCH_CUDA

#include <c10/cuda/CUDACachingAllocator.h>

#include <map>
#include <mutex>
#include <thread>

namespace spcoll {
namespace CA = c10::cuda::CUDACachingAllocator;

namespace {

struct PoolAlloc {
  spc_buffer* buf;
  size_t size;
};

// Outlives every static destructor: torch may free pool memory from its
// own exit handlers.
struct Pool {
  std::mutex mu;
  std::mutex route;                         // one PoolScratch at a time
  std::shared_ptr<Conn> conn;               // set by cuda_pool_use
  std::map<int, c10::MempoolId_t> ids;      // device -> its scratch pool
  std::map<uintptr_t, PoolAlloc> allocs;    // base -> what was given out
};

Pool& pool() {
  static Pool* p = new Pool();
  return *p;
}

}  // namespace

void cuda_pool_use(std::shared_ptr<Conn> conn, int dev, int64_t id0,
                   int64_t id1) {
  Pool& p = pool();
  std::lock_guard<std::mutex> g(p.mu);
  TORCH_CHECK_VALUE(p.conn == nullptr || p.conn == conn,
                    "spcoll: the memory pool already allocates through "
                    "another spcoll connection of this process");
  p.conn = std::move(conn);
  p.ids[dev] = c10::MempoolId_t{(c10::CaptureId_t)id0, (c10::CaptureId_t)id1};
}

bool cuda_pool_find(const Conn* conn, uintptr_t base, size_t size,
                    spc_buffer** buf) {
  Pool& p = pool();
  std::lock_guard<std::mutex> g(p.mu);
  if (p.conn.get() != conn)
    return false;
  auto it = p.allocs.find(base);
  if (it == p.allocs.end() || it->second.size != size)
    return false;
  *buf = it->second.buf;
  return true;
}

bool cuda_pool_holds(const at::Tensor& t) {
  uintptr_t base;
  size_t size;
  if (!t.is_cuda() || t.nbytes() == 0 || !cuda_segment_of(t, &base, &size))
    return false;
  Pool& p = pool();
  std::lock_guard<std::mutex> g(p.mu);
  auto it = p.allocs.find(base);
  return it != p.allocs.end() && it->second.size == size;
}

// The scratch pool is spcoll's own (not the one users route to with
// use_mem_pool), and one thread routes to it at a time: torch refuses a
// second routing to a pool already routed to, from any thread.
PoolScratch::PoolScratch(int dev) : dev_(dev) {
  c10::MempoolId_t id;
  {
    Pool& p = pool();
    std::lock_guard<std::mutex> g(p.mu);
    auto it = p.ids.find(dev);
    if (it == p.ids.end())
      return;
    id = it->second;
  }
  route_ = std::unique_lock<std::mutex>(pool().route);
  auto me = std::this_thread::get_id();
  try {
    CA::beginAllocateToPool(
        (c10::DeviceIndex)dev, id,
        [me](cudaStream_t) { return std::this_thread::get_id() == me; });
  } catch (const c10::Error&) {
    // beginAllocateToPool takes its reference on the pool before it
    // refuses; give it back.
    CA::releasePool((c10::DeviceIndex)dev, id);
    return;
  }
  id_[0] = id.first, id_[1] = id.second;
  on_ = true;
}

// As torch.cuda.use_mem_pool leaves it: routing ended, and the reference
// beginAllocateToPool took on the pool dropped.
PoolScratch::~PoolScratch() {
  if (!on_)
    return;
  c10::MempoolId_t id{id_[0], id_[1]};
  CA::endAllocateToPool((c10::DeviceIndex)dev_, id);
  CA::releasePool((c10::DeviceIndex)dev_, id);
}

}  // namespace spcoll

using spcoll::Conn;
using spcoll::pool;

// torch.cuda.CUDAPluggableAllocator's entry points, called under the
// caching allocator's lock; they take the Conn's lock inside it (lock
// order: allocator, then Conn; nothing here takes the allocator's lock
// with the Conn's held). alloc: `size` bytes
// of device memory on `device`, registered with spcolld
// (spc_buffer_alloc_device); NULL when the daemon or CUDA refuses, which
// torch reports as out of memory. free: the registration released (its
// ops' answers taken first) and the memory freed.
extern "C" __attribute__((visibility("default"))) void* spc_torch_pool_alloc(
    ssize_t size, int device, void* stream) {
  (void)stream;
  auto& p = pool();
  std::shared_ptr<Conn> conn;
  {
    std::lock_guard<std::mutex> g(p.mu);
    conn = p.conn;
  }
  if (conn == nullptr || size <= 0)
    return nullptr;
  spc_buffer* buf = nullptr;
  int rc;
  {
    Conn::Lock l(*conn);
    rc = spc_buffer_alloc_device(conn->client(), device, (size_t)size, &buf);
  }
  if (rc < 0)
    return nullptr;
  void* d = spc_buffer_data(buf);
  std::lock_guard<std::mutex> g(p.mu);
  p.allocs[(uintptr_t)d] = spcoll::PoolAlloc{buf, (size_t)size};
  conn->counts().pool_allocs++;
  return d;
}

extern "C" __attribute__((visibility("default"))) void spc_torch_pool_free(
    void* ptr, ssize_t size, int device, void* stream) {
  (void)size, (void)device, (void)stream;
  auto& p = pool();
  spc_buffer* buf = nullptr;
  std::shared_ptr<Conn> conn;
  {
    std::lock_guard<std::mutex> g(p.mu);
    auto it = p.allocs.find((uintptr_t)ptr);
    if (it == p.allocs.end())
      return;
    buf = it->second.buf;
    conn = p.conn;
    p.allocs.erase(it);
  }
  Conn::Lock l(*conn);
  (void)spc_buffer_free(buf);  // nothing to do if it fails
  conn->counts().pool_frees++;
}

#else  // torch without CUDA, or its headers not found

namespace spcoll {

void cuda_pool_use(std::shared_ptr<Conn>, int, int64_t, int64_t) {
  TORCH_CHECK(false, "spcoll: built without CUDA");
}
bool cuda_pool_find(const Conn*, uintptr_t, size_t, spc_buffer**) {
  return false;
}
bool cuda_pool_holds(const at::Tensor&) { return false; }
PoolScratch::PoolScratch(int dev) : dev_(dev) {}
PoolScratch::~PoolScratch() {}

}  // namespace spcoll

#endif
