// CUDA argsort: one stable merge sort (thrust) of all rows' flat indices, ordered by (row, value),
// then each index reduced to its position within its row. NaN sorts as the largest value.
#include <thrust/execution_policy.h>
#include <thrust/sequence.h>
#include <thrust/sort.h>
#include <thrust/transform.h>

#include "cuda/kernels/dtypes.cuh"

namespace kiln::cuda::kern {
namespace {

template <class T> struct RowOrder {
  const T* x;
  int64_t n;
  bool descending;
  __device__ bool operator()(int64_t i, int64_t j) const {
    const int64_t ri = i / n, rj = j / n;
    if (ri != rj) return ri < rj;
    const auto a = to_math(x[i]), b = to_math(x[j]);
    const bool an = a != a, bn = b != b;  // NaN
    if (descending) return (an && !bn) || (!an && !bn && a > b);
    return (!an && bn) || (!an && !bn && a < b);
  }
};

struct WithinRow {
  int64_t n;
  __device__ int64_t operator()(int64_t i) const { return i % n; }
};

}  // namespace

void launch_argsort(ScalarType type, const void* x, int64_t* out, int64_t rows, int64_t n, bool descending,
                    CUstream_st* stream) {
  const int64_t total = rows * n;
  if (total == 0) return;
  auto policy = thrust::cuda::par.on(stream);
  thrust::sequence(policy, out, out + total, int64_t{0});
  dispatch_all(type, [&]<class T>() {
    thrust::stable_sort(policy, out, out + total, RowOrder<T>{static_cast<const T*>(x), n, descending});
  });
  thrust::transform(policy, out, out + total, out, WithinRow{n});
}

}  // namespace kiln::cuda::kern
