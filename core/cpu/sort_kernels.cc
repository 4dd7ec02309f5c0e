// CPU argsort: a stable sort of each row's indices, rows in parallel. Values compare in their
// math type (float for f16/bf16); NaN sorts as the largest value (last ascending, first
// descending), as torch.sort.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/cpu/loops.h"
#include "core/kernels.h"

namespace kiln::cpu {
namespace {

template <class M> bool is_nan(M v) {
  if constexpr (std::is_floating_point_v<M>) return std::isnan(v);
  else return false;
}

void argsort_kernel(Tensor& indices, const Tensor& x, bool descending) {
  const int64_t n = x.dim() == 0 ? 1 : x.size(-1);
  const int64_t rows = n == 0 ? 0 : x.numel() / n;
  int64_t* out = indices.data_ptr<int64_t>();
  KILN_DISPATCH_ALL(x.dtype(), "argsort", [&]<class T>() {
    using M = opmath_t<T>;
    const T* xs = x.data_ptr<T>();
    parallel_for(0, rows, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(n, 1)), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const T* row = xs + r * n;
        int64_t* idx = out + r * n;
        std::iota(idx, idx + n, int64_t{0});
        auto value = [&](int64_t i) { return static_cast<M>(row[i]); };
        if (descending) {
          std::stable_sort(idx, idx + n, [&](int64_t i, int64_t j) {
            const M a = value(i), c = value(j);
            return (is_nan(a) && !is_nan(c)) || a > c;
          });
        } else {
          std::stable_sort(idx, idx + n, [&](int64_t i, int64_t j) {
            const M a = value(i), c = value(j);
            return (!is_nan(a) && is_nan(c)) || a < c;
          });
        }
      }
    });
  });
}

}  // namespace
}  // namespace kiln::cpu

KILN_REGISTER_KERNEL(argsort, ::kiln::DeviceType::CPU, &::kiln::cpu::argsort_kernel);
