// Storage: a refcounted block of device memory shared by a tensor and all its views.
// Its version counter is bumped by every in-place write, so autograd can tell when a tensor it
// saved for backward was modified afterwards.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "core/allocator.h"

namespace kiln {

class StorageImpl {
 public:
  StorageImpl(size_t nbytes, Device device);
  /// Wraps memory Kiln does not own; `deleter` (may be empty) runs when the last view is gone.
  StorageImpl(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter);
  ~StorageImpl();
  StorageImpl(const StorageImpl&) = delete;
  StorageImpl& operator=(const StorageImpl&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  uint32_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  std::function<void(void*)> deleter_;
  bool owned_ = true;
  std::atomic<uint32_t> version_{0};
};

using Storage = std::shared_ptr<StorageImpl>;

}  // namespace kiln
