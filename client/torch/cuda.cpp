// CUDA tensors in place (cuda.hpp): the registered segments, the
// allocator's hook that releases them, torch's current stream, and the
// Work of an op queued on it.
#include "cuda.hpp"

#include "backend.hpp"

#ifdef SPC_TORCH_CUDA

#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>

namespace spcoll {
namespace CA = c10::cuda::CUDACachingAllocator;

namespace {

// The registered segments of every Conn of the process. The allocator and
// its hook are process-wide, so this table is too: its lock is taken
// inside the allocator's lock (by the hook) and takes each Conn's lock,
// never the other way round.
struct Seg {
  std::weak_ptr<Conn> conn;
  spc_buffer* buf;
};

struct Segments {
  std::mutex mu;
  std::map<std::pair<Conn*, uintptr_t>, Seg> map;  // (conn, segment base)
};

Segments& segments() {
  static Segments* s = new Segments();  // outlives every static destructor
  return *s;
}

// Each registration for which pick(conn, base, seg) returns its Conn is
// released there (spc_buffer_free under that Conn's lock; nothing to do
// if it fails) and forgotten; nullptr keeps it. pick runs under the
// table's lock.
template <class Pick>
void release_where(Pick pick) {
  Segments& s = segments();
  std::lock_guard<std::mutex> g(s.mu);
  for (auto it = s.map.begin(); it != s.map.end();) {
    Conn* c = pick(it->first.first, it->first.second, it->second);
    if (c == nullptr) {
      ++it;
      continue;
    }
    Conn::Lock l(*c);
    (void)spc_buffer_free(it->second.buf);
    it = s.map.erase(it);
  }
}

// The allocator gives a segment back to CUDA: release it in every Conn
// first (spc_buffer_free waits for the daemon's ops still running, then
// the daemon closes its mapping). Conns are dropped after the table's
// lock, since the last reference may destroy one (cuda_forget).
void segment_freed(uintptr_t base) {
  std::vector<std::shared_ptr<Conn>> held;
  release_where([&](Conn* conn, uintptr_t b, const Seg& seg) -> Conn* {
    if (b != base)
      return nullptr;
    auto c = seg.conn.lock();
    if (c == nullptr)
      return nullptr;
    c->counts().segments_released++;
    held.push_back(c);
    return conn;
  });
}

void attach_hook() {
  static std::once_flag once;
  std::call_once(once, [] {
    CA::attachAllocatorTraceTracker([](const CA::TraceEntry& te) {
      if (te.action_ == CA::TraceEntry::SEGMENT_FREE ||
          te.action_ == CA::TraceEntry::SEGMENT_UNMAP)
        segment_freed((uintptr_t)te.addr_);
    });
  });
}

}  // namespace

bool cuda_segment_of(const at::Tensor& t, uintptr_t* base, size_t* size) {
  void* block = t.storage().data_ptr().get();
  if (block == nullptr)
    return false;
  try {
    void* b = CA::getBaseAllocation(block, size);
    *base = (uintptr_t)b;
    return b != nullptr;
  } catch (const c10::Error&) {
    return false;  // not a block of the caching allocator
  }
}

bool cuda_direct() {
  static const bool off = [] {
    const char* v = std::getenv("SPCOLL_CUDA_DIRECT");
    return v != nullptr && std::strcmp(v, "0") == 0;
  }();
  return !off && !CA::CUDAAllocatorConfig::expandable_segments();
}

bool cuda_in_segment(const at::Tensor& t) {
  uintptr_t base;
  size_t size;
  if (!t.is_cuda() || t.nbytes() == 0 || !t.is_contiguous())
    return false;
  return cuda_direct() ? cuda_segment_of(t, &base, &size)
                       : cuda_pool_holds(t);
}

bool cuda_take(const std::shared_ptr<Conn>& conn, const at::Tensor& t,
               Span* s) {
  int64_t n = (int64_t)t.nbytes();
  uintptr_t base;
  size_t size;
  if (!t.is_cuda() || n == 0 || !t.is_contiguous() ||
      !cuda_segment_of(t, &base, &size))
    return false;
  char* p = static_cast<char*>(t.data_ptr());
  spc_buffer* pooled;
  if (cuda_pool_find(conn.get(), base, size, &pooled)) {
    *s = Span{pooled, (uint64_t)((uintptr_t)p - base), p, n, false,
              (int)t.get_device()};
    return true;
  }
  if (!cuda_direct())
    return false;  // expandable segments: VMM memory IPC cannot share
  attach_hook();
  Segments& ss = segments();
  std::lock_guard<std::mutex> g(ss.mu);
  auto key = std::make_pair(conn.get(), base);
  auto it = ss.map.find(key);
  if (it != ss.map.end() && spc_buffer_size(it->second.buf) != size) {
    // Another segment at the same address: the hook missed the old one's
    // free (it should not), so its registration is stale. Drop it.
    Conn::Lock l(*conn);
    (void)spc_buffer_free(it->second.buf);
    ss.map.erase(it);
    it = ss.map.end();
  }
  if (it == ss.map.end()) {
    spc_buffer* buf = nullptr;
    Conn::Lock l(*conn);
    int rc = spc_buffer_register_device(conn->client(), (void*)base, size, &buf);
    if (rc < 0)
      C10_THROW_ERROR(DistBackendError,
                      "spcoll: registering torch's CUDA segment at " +
                          c10::str((void*)base) + " (" + std::to_string(size) +
                          " bytes) with spcolld: " +
                          status_text(rc, spc_last_error(conn->client())));
    it = ss.map.emplace(key, Seg{conn, buf}).first;
    conn->counts().segments++;
  }
  *s = Span{it->second.buf, (uint64_t)((uintptr_t)p - base), p, n, false,
            (int)t.get_device()};
  return true;
}

void cuda_forget(Conn* conn) {
  release_where([conn](Conn* c, uintptr_t, const Seg&) {
    return c == conn ? c : nullptr;  // its weak reference is gone already
  });
}

void* cuda_stream(int dev) {
  return c10::cuda::getCurrentCUDAStream((c10::DeviceIndex)dev).stream();
}

namespace {

class QueuedWork final : public c10d::Work {
 public:
  QueuedWork(c10d::OpType type, int dev, std::vector<at::Tensor> outs)
      : c10d::Work(-1, type),
        stream_(c10::cuda::getCurrentCUDAStream((c10::DeviceIndex)dev)),
        outs_(std::move(outs)),
        ev_(c10::DeviceType::CUDA) {
    ev_.record(stream_);
  }
  bool isCompleted() override { return true; }
  bool isSuccess() const override { return true; }
  std::vector<at::Tensor> result() override { return outs_; }
  bool wait(std::chrono::milliseconds) override {
    synchronize();
    return true;
  }
  void synchronize() override {
    ev_.block(c10::cuda::getCurrentCUDAStream(stream_.device_index()));
  }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    c10::StreamGuard g(stream_);  // completion recorded on the op's stream
    auto f = c10::make_intrusive<c10::ivalue::Future>(
        c10::ListType::create(c10::TensorType::get()),
        std::vector<c10::Device>{stream_.device()});
    f->markCompleted(c10::IValue(outs_));
    return f;
  }

 private:
  c10::cuda::CUDAStream stream_;
  std::vector<at::Tensor> outs_;
  c10::Event ev_;
};

}  // namespace

c10::intrusive_ptr<c10d::Work> cuda_work(c10d::OpType type, int dev,
                                         std::vector<at::Tensor> outputs) {
  return c10::make_intrusive<QueuedWork>(type, dev, std::move(outputs));
}

}  // namespace spcoll

#else  // torch without CUDA, or its headers not found

namespace spcoll {

bool cuda_direct() { return false; }
bool cuda_in_segment(const at::Tensor&) { return false; }
bool cuda_segment_of(const at::Tensor&, uintptr_t*, size_t*) { return false; }
bool cuda_take(const std::shared_ptr<Conn>&, const at::Tensor&, Span*) {
  return false;
}
void cuda_forget(Conn*) {}
void* cuda_stream(int) { return nullptr; }
c10::intrusive_ptr<c10d::Work> cuda_work(c10d::OpType, int,
                                         std::vector<at::Tensor>) {
  TORCH_CHECK(false, "spcoll: built without CUDA");
}

}  // namespace spcoll

#endif
