// Arena: staging memory in spc_buffers (see conn.hpp for the contract).
#include <c10/util/Exception.h>

#include "conn.hpp"

namespace spcoll {

static constexpr int kMinClass = 8;  // 256 B: a cache line pair and more

void* Arena::Block::data() const {
  return static_cast<char*>(spc_buffer_data(buf)) + off;
}

Arena::~Arena() {
  for (auto& kv : bufs_)
    spc_buffer_free(kv.second);  // a failure leaves nothing to undo
}

int Arena::class_of(size_t n) {
  int k = kMinClass;
  while ((size_t(1) << k) < n)
    k++;
  return k;
}

static spc_buffer* alloc_buffer(spc_client* c, size_t n) {
  spc_buffer* b = nullptr;
  int rc = spc_buffer_alloc(c, n, &b);
  if (rc < 0)
    C10_THROW_ERROR(DistBackendError,
                    "spcoll: staging memory of " + std::to_string(n) +
                        " bytes: " + status_text(rc, spc_last_error(c)));
  return b;
}

void Arena::release_over_cache() {
  std::vector<spc_buffer*> doomed;
  {
    std::lock_guard<std::mutex> g(mu_);
    doomed.swap(doomed_);
    for (auto* b : doomed) {
      bufs_.erase(reinterpret_cast<uintptr_t>(spc_buffer_data(b)));
      block_size_.erase(reinterpret_cast<uintptr_t>(spc_buffer_data(b)));
    }
  }
  for (auto* b : doomed)
    spc_buffer_free(b);
}

bool Arena::reuse(size_t n, Block* out) {
  std::lock_guard<std::mutex> g(mu_);
  if (n > kLargeBytes) {
    // a cached buffer at most twice the size asked for
    auto it = large_.lower_bound(n);
    if (it == large_.end() || it->first > 2 * n)
      return false;
    *out = it->second;
    cached_ -= out->size;
    large_.erase(it);
    return true;
  }
  auto& fl = small_[class_of(n < 1 ? 1 : n) - kMinClass];
  if (fl.empty())
    return false;
  *out = fl.back();
  fl.pop_back();
  return true;
}

Arena::Block Arena::fresh(size_t n) {
  release_over_cache();
  if (n > kLargeBytes) {
    size_t sz = (n + kLargeBytes - 1) / kLargeBytes * kLargeBytes;
    spc_buffer* buf = alloc_buffer(c_, sz);
    std::lock_guard<std::mutex> g(mu_);
    bufs_[reinterpret_cast<uintptr_t>(spc_buffer_data(buf))] = buf;
    block_size_[reinterpret_cast<uintptr_t>(spc_buffer_data(buf))] = sz;
    return Block{buf, 0, sz};
  }
  // a new slab, cut wholly into blocks of this class
  int k = class_of(n < 1 ? 1 : n);
  size_t bs = size_t(1) << k;
  spc_buffer* buf = alloc_buffer(c_, kSlabBytes);
  std::lock_guard<std::mutex> g(mu_);
  bufs_[reinterpret_cast<uintptr_t>(spc_buffer_data(buf))] = buf;
  block_size_[reinterpret_cast<uintptr_t>(spc_buffer_data(buf))] = bs;
  auto& fl = small_[k - kMinClass];
  for (size_t off = bs; off + bs <= kSlabBytes; off += bs)
    fl.push_back(Block{buf, off, bs});
  return Block{buf, 0, bs};
}

void Arena::put(const Block& b) {
  std::lock_guard<std::mutex> g(mu_);
  if (b.size <= kLargeBytes) {  // slab blocks; whole buffers are larger
    small_[class_of(b.size) - kMinClass].push_back(b);
    return;
  }
  large_.emplace(b.size, b);
  cached_ += b.size;
  while (cached_ > kCacheBytes && !large_.empty()) {
    auto it = std::prev(large_.end());  // the largest goes first
    cached_ -= it->second.size;
    doomed_.push_back(it->second.buf);
    large_.erase(it);
  }
}

bool Arena::put_addr(void* p) {
  auto a = reinterpret_cast<uintptr_t>(p);
  Block b;
  {
    std::lock_guard<std::mutex> g(mu_);
    auto it = block_size_.upper_bound(a);
    if (it == block_size_.begin())
      return false;
    --it;
    spc_buffer* buf = bufs_[it->first];
    size_t bs = it->second, off = a - it->first;
    if (off >= spc_buffer_size(buf) || off % bs != 0)
      return false;
    b = Block{buf, off, bs};
  }
  put(b);
  return true;
}

bool Arena::locate(const void* p, size_t n, spc_buffer** buf, uint64_t* off) {
  auto a = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> g(mu_);
  auto it = bufs_.upper_bound(a);
  if (it == bufs_.begin())
    return false;
  --it;
  size_t size = spc_buffer_size(it->second);
  if (a - it->first > size || n > size - (a - it->first))
    return false;
  *buf = it->second;
  *off = a - it->first;
  return true;
}

}  // namespace spcoll
