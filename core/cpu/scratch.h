// Per-thread scratch buffers that outlive a kernel call, for CPU kernels that need working memory
// per task (attention's tiles, a convolution's column matrices): no allocation, page faults or
// zeroing per call, which on the small products of a training step cost as much as several
// percent of it. A few slots per thread and element type, each grown to the largest size asked
// of it and kept for the thread's life.
#pragma once

#include <Eigen/Core>

#include <cstdint>
#include <vector>

namespace kiln::cpu {

inline constexpr int kScratchSlots = 10;

/// This thread's slot `slot` (0 <= slot < kScratchSlots) for element type T: at least n elements,
/// aligned to Eigen's packets. Contents unspecified: the kernel writes every element before it
/// reads it. Growing a slot invalidates the pointers it returned before; a kernel must not call
/// another kernel that uses the same slot while it still holds the pointer.
template <class T> T* thread_scratch(int slot, int64_t n) {
  thread_local std::vector<T, Eigen::aligned_allocator<T>> buffers[kScratchSlots];
  auto& b = buffers[slot];
  if (b.size() < static_cast<size_t>(n)) b.resize(static_cast<size_t>(n));
  return b.data();
}

}  // namespace kiln::cpu
