// Host-side helpers every cuda/*.cc launcher shares: kiln::DType as the launchers' ScalarType, and
// the raw current stream of a tensor's device (the stream every launcher queues on).
#pragma once

#include "core/tensor.h"
#include "cuda/kernels/launch.h"
#include "cuda/stream.h"

namespace kiln::cuda {

static_assert(static_cast<int>(kern::ScalarType::b8) == static_cast<int>(DType::b8) &&
              static_cast<int>(kern::ScalarType::i32) == static_cast<int>(DType::i32) &&
              static_cast<int>(kern::ScalarType::i64) == static_cast<int>(DType::i64) &&
              static_cast<int>(kern::ScalarType::f16) == static_cast<int>(DType::f16) &&
              static_cast<int>(kern::ScalarType::bf16) == static_cast<int>(DType::bf16) &&
              static_cast<int>(kern::ScalarType::f32) == static_cast<int>(DType::f32) &&
              static_cast<int>(kern::ScalarType::f64) == static_cast<int>(DType::f64));

inline kern::ScalarType scalar_type(DType t) { return static_cast<kern::ScalarType>(t); }

/// The current stream of t's device, as the launchers take it.
inline CUstream_st* stream_of(const Tensor& t) { return current_stream(t.device().index).raw(); }

}  // namespace kiln::cuda
