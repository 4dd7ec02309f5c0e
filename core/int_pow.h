// Integer power by squaring, shared by the CPU kernels and the CUDA kernels (nvcc compiles it
// for the device too). Negative exponents follow PyTorch: 1 for base 1, ±1 for base -1, else 0.
#pragma once

#if defined(__CUDACC__)
#define KILN_HOST_DEVICE __host__ __device__
#else
#define KILN_HOST_DEVICE
#endif

namespace kiln {

template <class I> KILN_HOST_DEVICE inline I int_pow(I base, I e) {
  if (e < 0) {
    if (base == 1) return 1;
    if (base == -1) return (e & 1) ? -1 : 1;
    return 0;
  }
  I r = 1;
  while (e) {
    if (e & 1) r = static_cast<I>(r * base);
    base = static_cast<I>(base * base);
    e >>= 1;
  }
  return r;
}

}  // namespace kiln
