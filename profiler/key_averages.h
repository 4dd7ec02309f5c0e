// key_averages(): recorded events aggregated per name (and per tensor shapes when asked), with
// self time (minus the time of events nested inside, on the same thread), as PyTorch's
// prof.key_averages().table(sort_by="self_cpu_time_total").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "profiler/profiler.h"

namespace kiln::profiler {

struct KeyAverage {
  std::string name, category, shapes;
  int64_t calls = 0;
  int64_t total_ns = 0, self_ns = 0;
  double device_ms = 0;  // summed kernel time measured on the device (0 on CPU)
  int64_t bytes = 0;     // collectives: payload bytes summed
  double flops = 0;      // linear, bmm, conv2d: FLOPs summed
};

/// The kernels' time in one class (see KeyAverages::kernel_classes).
struct KernelClass {
  std::string name;
  int64_t calls = 0, self_ns = 0;
  double device_ms = 0, flops = 0;
};

class KeyAverages {
 public:
  KeyAverages(const std::vector<Event>& events, bool group_by_shape);
  /// Rows sorted by self time, longest first.
  const std::vector<KeyAverage>& rows() const { return rows_; }
  /// The row named `name` (first match), or nullptr.
  const KeyAverage* find(const std::string& name) const;
  /// FLOPs of every kernel summed.
  double total_flops() const;
  /// The table: name, category, calls, self/total time, self %, device time (and shapes);
  /// `row_limit` rows at most (0: all).
  std::string table(size_t row_limit = 0) const;
  /// The kernel rows summed in three classes, in this order: "GEMM" (linear, bmm, conv2d and its
  /// backward), "attention" (the fused attention's forward and backward) and "memory-bound"
  /// (every other kernel: elementwise, reductions, softmax, norms, copies, indexing, optimizer).
  std::vector<KernelClass> kernel_classes() const;
  /// kernel_classes() as lines: each class's calls, kernel time (the device's where measured,
  /// else self CPU time), share of all kernel time and, for GEMM and attention, the rate of the
  /// FLOPs the profiler counts.
  std::string kernel_class_table() const;

 private:
  std::vector<KeyAverage> rows_;
  bool by_shape_;
};

/// Self time of each event (parallel to `events`): its duration minus that of the events nested
/// directly inside it on the same thread row.
std::vector<int64_t> self_times(const std::vector<Event>& events);

}  // namespace kiln::profiler
