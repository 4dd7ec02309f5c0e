// CUDA runtime calls that benchmarks above cuda/ need without including a CUDA header (only
// cuda/ does: DESIGN.md, //tests:layering_test). Each call is checked and throws on failure.
#pragma once

#include <cstddef>

namespace kiln::cuda {

/// Copies `bytes` between two blocks of the current device on its current stream, without
/// waiting (cudaMemcpyAsync device to device: the bandwidth roof benchmarks compare kernels with).
void copy_device_bytes(void* dst, const void* src, size_t bytes);

/// Opens and closes the range an external profiler started with capture off records
/// (cudaProfilerStart/Stop: `ncu --profile-from-start off`, `nsys --capture-range=cudaProfilerApi`).
void profiler_start();
void profiler_stop();

}  // namespace kiln::cuda
