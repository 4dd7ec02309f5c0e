#include "core/allocator.h"

#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

namespace kiln {
namespace {

/// CPU memory, 64-byte aligned. Blocks of 64 KiB and more are kept on exact-size free lists when
/// freed: a training step allocates the same shapes every iteration, and fresh pages from the
/// kernel cost a page fault each (a new 64 MiB tensor took ~30 ms in faults). The cache holds
/// at most KILN_CPU_CACHE_MB (default 2048) megabytes; empty_cpu_cache() returns it all.
class CpuAllocator final : public Allocator {
 public:
  CpuAllocator() {
    if (const char* env = std::getenv("KILN_CPU_CACHE_MB")) limit_ = static_cast<size_t>(std::atoll(env)) << 20;
  }

  void* allocate(size_t nbytes, Device) override {
    if (nbytes == 0) return nullptr;
    const size_t size = rounded(nbytes);
    if (size >= kMinCached) {
      std::lock_guard<std::mutex> g(mu_);
      auto it = free_.find(size);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        cached_ -= size;
        return p;
      }
    }
    void* p = std::aligned_alloc(64, size);
    if (p == nullptr) {
      empty();
      p = std::aligned_alloc(64, size);
    }
    KILN_CHECK(p != nullptr, "cpu allocator: out of memory allocating {} bytes", nbytes);
    return p;
  }

  void deallocate(void* ptr, size_t nbytes, Device) override {
    if (ptr == nullptr) return;
    const size_t size = rounded(nbytes);
    if (size >= kMinCached) {
      std::lock_guard<std::mutex> g(mu_);
      if (cached_ + size <= limit_) {
        free_[size].push_back(ptr);
        cached_ += size;
        return;
      }
    }
    std::free(ptr);
  }

  void empty() {
    std::lock_guard<std::mutex> g(mu_);
    for (auto& [size, blocks] : free_)
      for (void* p : blocks) std::free(p);
    free_.clear();
    cached_ = 0;
  }

  size_t cached() {
    std::lock_guard<std::mutex> g(mu_);
    return cached_;
  }

 private:
  static constexpr size_t kMinCached = size_t{64} << 10;
  static size_t rounded(size_t n) {
    const size_t unit = n >= kMinCached ? 4096 : 64;
    return (n + unit - 1) / unit * unit;
  }

  std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  size_t cached_ = 0;
  size_t limit_ = size_t{2048} << 20;
};

CpuAllocator& cpu_allocator() {
  static CpuAllocator* a = new CpuAllocator();  // never destroyed: tensors may outlive statics
  return *a;
}

Allocator* g_allocators[kNumDeviceTypes] = {};
Allocator* g_pinned_allocator = nullptr;

}  // namespace

Allocator& allocator_for(DeviceType type) {
  if (type == DeviceType::CPU && g_allocators[0] == nullptr) return cpu_allocator();
  Allocator* a = g_allocators[static_cast<int>(type)];
  KILN_CHECK(a != nullptr, "no allocator for device type {}: this build has no {} backend linked",
             device_type_name(type), device_type_name(type));
  return *a;
}

void register_allocator(DeviceType type, Allocator* allocator) {
  g_allocators[static_cast<int>(type)] = allocator;
}

Allocator* pinned_allocator() { return g_pinned_allocator; }
void register_pinned_allocator(Allocator* allocator) { g_pinned_allocator = allocator; }

void empty_cpu_cache() { cpu_allocator().empty(); }
size_t cpu_cached_bytes() { return cpu_allocator().cached(); }

}  // namespace kiln
