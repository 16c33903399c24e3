// CUDA tensors in place: the segments of torch's CUDA caching allocator
// registered with spcolld, ordered on torch's current stream.
//
// A segment (one cudaMalloc of the allocator) is registered the first
// time an op takes a tensor inside it, and stays registered until torch
// gives it back to CUDA: the allocator's trace hook reports the
// SEGMENT_FREE before its cudaFree, and the registration is released
// there (libspclient first takes the answers of every op still running
// in the daemon), so the daemon never maps memory that torch freed:
// torch.cuda.empty_cache and the retry after an out-of-memory stay safe.
//
// Expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)
// are cuMem memory, which legacy IPC cannot share: there the run of
// mappings under a tensor is registered (libspclient exports each as a
// file descriptor), later tensors inside it share it, and a SEGMENT_UNMAP
// of any of it releases it (the daemon's own mapping keeps the physical
// memory alive until then, whatever torch does).
//
// Not in place: memory outside the caching allocator, and everything but
// spcoll's pool under SPCOLL_CUDA_DIRECT=0; those ops take the Python
// backend's device path or a staged copy (backend.cpp).
//
// Built with SPC_TORCH_CUDA where torch has CUDA and its headers are
// found (mk/torch_ext.mk); without, cuda_direct() is false and every
// CUDA tensor takes the Python backend's device path.
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

extern "C" {
#include "spcoll.h"
}

namespace spcoll {

class Conn;
struct Span;

// Whether this process's CUDA tensors can go in place: built with CUDA,
// and not turned off with SPCOLL_CUDA_DIRECT=0 (then no segment of torch's allocator is exported
// to the daemon; read once). (Tensors in spcoll's pool go in place
// regardless: cuda_pool_holds.)
bool cuda_direct();

// t's bytes as op memory, when t is contiguous in a segment of torch's
// caching allocator (registered on first use). false otherwise; throws
// DistBackendError when the daemon refuses the segment. Never call it
// with the Conn's lock held (it takes the allocator's lock, and the
// allocator's hook takes the Conn's).
bool cuda_take(const std::shared_ptr<Conn>& conn, const at::Tensor& t,
               Span* s);

// Why this thread's last CUDA tensor that cuda_take could not register
// was refused ("" when none was).
std::string cuda_refused();

// Whether cuda_take would take t in place (without registering it).
bool cuda_in_segment(const at::Tensor& t);

// Where t's storage starts in its segment of torch's caching allocator:
// the segment's base and size; false for other memory.
bool cuda_segment_of(const at::Tensor& t, uintptr_t* base, size_t* size);

// spcoll's MemPools (cuda_pool.cpp, spcoll.c10d.mem_pool): device memory
// that spc_torch_pool_alloc allocates and registers through conn, the
// process's connection, for every MemPool on its allocator; (id0, id1)
// is the id of the one on device dev that ops' scratch goes to
// (PoolScratch), another than the users' pool. Its tensors go in place with no registration on first
// use, and also where torch's allocator uses expandable segments (the
// pool's allocator is spcoll's, never VMM memory).
void cuda_pool_use(std::shared_ptr<Conn> conn, int dev, int64_t id0,
                   int64_t id1);
// The pool's buffer for the segment [base, base + size) of conn.
bool cuda_pool_find(const Conn* conn, uintptr_t base, size_t size,
                    spc_buffer** buf);
// Whether t lies in memory of spcoll's pool.
bool cuda_pool_holds(const at::Tensor& t);

// For its lifetime, this thread's allocations from torch's CUDA allocator
// on dev come from spcoll's pool of dev, where there is one (an op's
// scratch where expandable segments keep the rest out of place).
class PoolScratch {
 public:
  explicit PoolScratch(int dev);
  ~PoolScratch();
  PoolScratch(const PoolScratch&) = delete;
  PoolScratch& operator=(const PoolScratch&) = delete;

 private:
  std::unique_lock<std::mutex> route_;  // held while routed
  int dev_;
  bool on_ = false;
  unsigned long long id_[2] = {0, 0};
};

// Forget conn's segments (the Conn is going away).
void cuda_forget(Conn* conn);

// torch's current stream on CUDA device dev, as an spc_stream.
void* cuda_stream(int dev);

// The Work of an op already queued on dev's current stream: wait() makes
// the caller's current stream wait for it; the future is complete and
// orders its users' streams after it, as ProcessGroupNCCL's does.
c10::intrusive_ptr<c10d::Work> cuda_work(c10d::OpType type, int dev,
                                         std::vector<at::Tensor> outputs);

}  // namespace spcoll
