// The opt-in CPU allocator (spcoll.c10d.use_cpu_allocator): torch's CPU
// tensors made after it is installed live in spcoll memory, so the
// backend takes them without staging. What it changes for the process is
// in docs/python.md: memory is shared with the daemon (bounded by its
// per-client limits) and stays shared with a child forked afterwards,
// where the child's own new tensors come from the allocator it replaced.
#include <c10/core/CPUAllocator.h>
#include <unistd.h>

#include <cstring>

#include "allocator.hpp"

namespace spcoll {
namespace {

class CpuAllocator;
// c10's raw deleter is a bare function pointer: it reaches the one
// allocator of the process through this (set once, never freed).
CpuAllocator* the_allocator = nullptr;

class CpuAllocator final : public c10::Allocator {
 public:
  CpuAllocator(std::shared_ptr<Conn> c, c10::Allocator* prev)
      : conn_(std::move(c)), prev_(prev) {}

  // The context is the data pointer (raw_allocate needs that); the block
  // is found again from its address when it is freed.
  c10::DataPtr allocate(size_t n) override {
    if (n == 0 || getpid() != conn_->pid())
      return prev_->allocate(n);
    Arena::Block b;
    try {
      b = conn_->block(n);
    } catch (const std::exception&) {
      // the daemon refused more memory: ordinary memory, staged by ops
      conn_->count_refused(n);
      return prev_->allocate(n);
    }
    void* p = b.data();
    return {p, p, &raw_free, c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &raw_free; }

  void copy_data(void* dst, const void* src, size_t n) const override {
    std::memcpy(dst, src, n);
  }

 private:
  static void raw_free(void* p) {
    CpuAllocator* a = the_allocator;
    if (!a->conn_->arena().put_addr(p))
      a->prev_->raw_deleter()(p);  // raw_allocate fell back to the old one
  }

  std::shared_ptr<Conn> conn_;
  c10::Allocator* prev_;
};

}  // namespace

void use_cpu_allocator(std::shared_ptr<Conn> conn) {
  // Never freed: tensors it made may outlive every other object here.
  static constexpr uint8_t kPriority = 1;  // over c10's default (0)
  if (the_allocator != nullptr)
    return;
  the_allocator = new CpuAllocator(std::move(conn), c10::GetCPUAllocator());
  c10::SetCPUAllocator(the_allocator, kPriority);
}

}  // namespace spcoll
