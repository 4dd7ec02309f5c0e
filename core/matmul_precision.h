// Whether f32 matrix products and convolutions may use TF32 tensor cores (inputs rounded to a
// 10-bit mantissa, f32 accumulation) on GPUs that have them, as torch.set_float32_matmul_precision:
// "highest" (the default: full f32, matching the CPU kernels) or "high" (TF32 allowed). Read by
// the CUDA backend's cuBLAS/cuBLASLt GEMMs and cuDNN convolutions at each call; the CPU ignores it.
#pragma once

#include <string_view>

namespace kiln {

enum class Float32MatmulPrecision { highest, high };

void set_float32_matmul_precision(Float32MatmulPrecision p);
/// "highest" or "high"; anything else throws naming the value.
void set_float32_matmul_precision(std::string_view p);
Float32MatmulPrecision float32_matmul_precision();
/// True when the precision is "high".
inline bool allow_tf32() { return float32_matmul_precision() == Float32MatmulPrecision::high; }

}  // namespace kiln
