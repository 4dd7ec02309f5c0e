// Which instruction set the CPU kernels' hot loops run on, chosen once at run time as PyTorch's
// CPU_CAPABILITY is: the AVX-512 unit (//core:avx512_kernels: Eigen's GEMM, the small GEMM, the
// gelu loops) where the build has it and the CPU has AVX-512 F, DQ, BW and VL, else the build's
// baseline (AVX2 in the default x86-64-v3 build). KILN_CPU_ISA=avx2 (anything but avx512)
// forces the baseline.
#pragma once

namespace kiln::cpu {

bool use_avx512();

}  // namespace kiln::cpu
