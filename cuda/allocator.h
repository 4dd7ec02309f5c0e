// The CUDA caching allocator (one block pool per device, see cuda/caching_allocator.h), which
// backs every CUDA tensor's storage, and the pinned host memory that asynchronous host-to-device
// copies need. Includes no CUDA header.
#pragma once

#include <cstddef>
#include <string>

#include "core/tensor.h"
#include "cuda/caching_allocator.h"
#include "cuda/stream.h"

namespace kiln::cuda {

/// Statistics of `device`'s allocator (allocated, reserved, peaks, cached, call counts).
MemoryStats memory_stats(int device = 0);
void reset_peak_memory_stats(int device = 0);
/// Returns every unused cached block of every device to CUDA.
void empty_cache();
/// A readable account of `device`'s memory.
std::string memory_summary(int device = 0);
/// Marks a CUDA tensor's memory as used on `stream` as well as the stream it was allocated on:
/// when freed it is not reused until the work queued on `stream` has finished.
void record_stream(const Tensor& t, const Stream& stream);

/// A CPU tensor in page-locked memory with `t`'s values (contiguous), so copies from it to a GPU
/// run asynchronously. Without a CUDA device, a plain contiguous copy.
Tensor pin_memory(const Tensor& t);
/// Whether `t`'s memory is page-locked by Kiln's pinned allocator.
bool is_pinned(const Tensor& t);

namespace detail {
/// The private pools of CUDA graph captures (cuda/graph.h) in `device`'s caching allocator; see
/// CachingAllocatorCore::begin_private_pool.
void begin_private_pool(int device, PoolId id, const Stream& stream);
void end_private_pool(int device, PoolId id);
void release_private_pool(int device, PoolId id);
/// Pinned host blocks hold until an event recorded after an async copy from them completes.
bool is_pinned_ptr(const void* ptr);
void record_pinned_use(const void* ptr, const Stream& stream);
}  // namespace detail

}  // namespace kiln::cuda
