// The CPU's measured f32 GEMM rate: what MFU is taken against on the CPU (the trainers' run
// monitor, //bench:attention_bench).
#pragma once

#include <string>

namespace kiln::profiler {

/// The CPU's f32 GEMM rate as Kiln's own matmul reaches it at the current thread count (a 1024^3
/// product, best of 8), the peak MFU on CPU is taken against: a CPU publishes no peak Kiln could
/// look up, and a clock-times-width formula misses turbo clocks (it gave 117 % MFU on an AMD EPYC).
/// `ranks` ranks of the same kind: the sum of theirs. `description` receives how it was measured.
double measured_cpu_gemm_flops(std::string* description = nullptr, int ranks = 1);

}  // namespace kiln::profiler
