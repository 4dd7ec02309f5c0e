// Device memory allocators behind Storage. CPU memory is 64-byte aligned so vector loads and
// cache lines line up, and large freed blocks are cached for reuse; `cuda/` registers its caching allocator for DeviceType::CUDA.
#pragma once

#include <cstddef>
#include <memory>

#include "core/device.h"

namespace kiln {

class Allocator {
 public:
  virtual ~Allocator() = default;
  /// Returns memory of at least `nbytes` on `device`; throws kiln::Error when none is left.
  virtual void* allocate(size_t nbytes, Device device) = 0;
  virtual void deallocate(void* ptr, size_t nbytes, Device device) = 0;
};

/// The allocator registered for a device type; throws naming the device if there is none
/// (e.g. a CUDA tensor in a build without the CUDA backend).
Allocator& allocator_for(DeviceType type);
void register_allocator(DeviceType type, Allocator* allocator);

/// Page-locked host memory, which a GPU backend copies from asynchronously; `cuda/` registers
/// its pinned allocator here. nullptr when no backend registered one.
Allocator* pinned_allocator();
void register_pinned_allocator(Allocator* allocator);

/// Frees the CPU allocator's cached blocks (it keeps freed blocks of 64 KiB and more for reuse).
void empty_cpu_cache();
/// Bytes the CPU allocator holds in its cache.
size_t cpu_cached_bytes();

}  // namespace kiln
