// Counts the CPU memory tensors hold while it is alive: live bytes and their peak, for tests and
// benchmarks that compare memory use (activation checkpointing, fused attention). It wraps the
// registered CPU allocator and puts it back on destruction; blocks it did not hand out are passed
// through uncounted. One at a time, installed while no other thread is allocating.
#pragma once

#include <algorithm>
#include <cstddef>
#include <mutex>
#include <unordered_set>

#include "core/allocator.h"

namespace kiln {

class CpuMemoryTracker final : public Allocator {
 public:
  CpuMemoryTracker() : inner_(&allocator_for(DeviceType::CPU)) { register_allocator(DeviceType::CPU, this); }
  ~CpuMemoryTracker() override { register_allocator(DeviceType::CPU, inner_); }
  CpuMemoryTracker(const CpuMemoryTracker&) = delete;
  CpuMemoryTracker& operator=(const CpuMemoryTracker&) = delete;

  void* allocate(size_t nbytes, Device device) override {
    void* p = inner_->allocate(nbytes, device);
    std::lock_guard<std::mutex> g(mu_);
    if (p != nullptr) ours_.insert(p);
    live_ += nbytes;
    peak_ = std::max(peak_, live_);
    return p;
  }
  void deallocate(void* ptr, size_t nbytes, Device device) override {
    {
      std::lock_guard<std::mutex> g(mu_);
      if (ours_.erase(ptr) > 0) live_ -= nbytes;
    }
    inner_->deallocate(ptr, nbytes, device);
  }

  /// Bytes allocated through the tracker and not yet freed.
  size_t live_bytes() const { std::lock_guard<std::mutex> g(mu_); return live_; }
  /// The most live_bytes() has been since construction or reset_peak().
  size_t peak_bytes() const { std::lock_guard<std::mutex> g(mu_); return peak_; }
  void reset_peak() { std::lock_guard<std::mutex> g(mu_); peak_ = live_; }

 private:
  Allocator* inner_;
  mutable std::mutex mu_;
  std::unordered_set<void*> ours_;
  size_t live_ = 0, peak_ = 0;
};

}  // namespace kiln
