// fill and copy (with dtype conversion) on CUDA: out = value, out = convert(src).
#include "cuda/kernels/dtypes.cuh"
#include "cuda/kernels/loops.cuh"

namespace kiln::cuda::kern {
namespace {

template <class T> struct FillF {
  T v;
  __device__ T operator()() const { return v; }
};

template <class To, class From> struct ConvertF {
  __device__ To operator()(From x) const { return convert<To>(x); }
};

}  // namespace

void launch_fill(ScalarType out, const ElementwiseArgs<1>& a, double dvalue, int64_t ivalue, CUstream_st* stream) {
  dispatch_all(out, [&]<class T>() {
    T v;
    // The CPU takes integers from the integer value and floats from the double (Scalar::to).
    if constexpr (std::is_same_v<T, bool>) v = dvalue != 0 || ivalue != 0;
    else if constexpr (std::is_integral_v<T>) v = static_cast<T>(ivalue);
    else if constexpr (std::is_same_v<T, __half>) v = __float2half_rn(static_cast<float>(dvalue));
    else if constexpr (std::is_same_v<T, __nv_bfloat16>) v = __float2bfloat16_rn(static_cast<float>(dvalue));
    else v = static_cast<T>(dvalue);
    run_elementwise<T, T, 0>(a, FillF<T>{v}, stream);
  });
}

void launch_copy(ScalarType out, ScalarType src, const ElementwiseArgs<2>& a, CUstream_st* stream) {
  dispatch_all(out, [&]<class To>() {
    dispatch_all(src, [&]<class From>() { run_elementwise<To, From, 1>(a, ConvertF<To, From>{}, stream); });
  });
}

}  // namespace kiln::cuda::kern
