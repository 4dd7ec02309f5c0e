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
  /// Frees the memory (`nbytes` 0) or allocates `nbytes` afresh (contents undefined), keeping
  /// this object, so every tensor and view of it, and its version: PyTorch's
  /// untyped_storage().resize_(), with which FSDP frees gathered parameters between their uses.
  /// Only for memory Kiln allocated; throws for wrapped memory.
  void resize_(size_t nbytes);
  /// Sets the version back, as torch.autograd._unsafe_preserve_version_counter: only for a
  /// writer that restores exactly the contents autograd saved (FSDP's re-gather for backward).
  void set_version_unsafe(uint32_t v) { version_.store(v, std::memory_order_relaxed); }

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
