// CPU argmax/argmin along one dim (any strides): contiguous rows find the extreme by the
// vectorised fold and then its first index; a long single row is split across threads, the
// earliest chunk winning ties. The first NaN wins, as in PyTorch.
#include <algorithm>
#include <memory>
#include <vector>

#include "core/cpu/reduce_fold.h"

namespace kiln::cpu {
namespace {

using namespace reduce_detail;

/// True when v should replace the current best (strictly better; the first NaN wins).
template <bool IsMax, class A> inline bool better(A v, A best) {
  if constexpr (std::is_floating_point_v<A>) {
    if (best != best) return false;
    if (v != v) return true;
  }
  return IsMax ? v > best : v < best;
}

template <bool IsMax, class T> void arg_scan(const T* p, int64_t stride, int64_t b, int64_t e, opmath_t<T>& best,
                                             int64_t& where) {
  using A = opmath_t<T>;
  if (stride == 1) {
    // The extreme value by the vectorised fold, then the first place it occurs.
    constexpr ReduceKind K = IsMax ? ReduceKind::max : ReduceKind::min;
    const A m = fold_contiguous<K, T, A>(p + b, e - b);
    best = m;
    for (int64_t i = b; i < e; ++i) {
      const A v = static_cast<A>(p[i]);
      if (m != m ? v != v : v == m) {
        where = i;
        return;
      }
    }
  }
  A bv = static_cast<A>(p[b * stride]);
  int64_t bi = b;
  for (int64_t i = b + 1; i < e; ++i) {
    A v = static_cast<A>(p[i * stride]);
    if (better<IsMax>(v, bv)) { bv = v; bi = i; }
  }
  best = bv;
  where = bi;
}

template <bool IsMax, class T> void arg_reduce_typed(Tensor& out, const Tensor& x, int64_t dim) {
  using A = opmath_t<T>;
  const int64_t nd = x.dim();
  const int64_t D = nd == 0 ? 1 : x.sizes()[dim], sd = nd == 0 ? 1 : x.strides()[dim];
  KILN_CHECK(D > 0, "{}: cannot reduce over dim {} of size 0 (input shape {})", IsMax ? "argmax" : "argmin", dim,
             x.sizes());
  Shape ks, kx, ko;
  for (int64_t d = 0; d < nd; ++d)
    if (d != dim) { ks.push_back(x.sizes()[d]); kx.push_back(x.strides()[d]); ko.push_back(out.strides()[d]); }
  const int64_t O = shape_numel(ks);
  const T* p = static_cast<const T*>(x.data_ptr());
  int64_t* o = out.data_ptr<int64_t>();
  if (O >= 2 * get_num_threads() || D < kGrainSize) {
    parallel_for(0, O, std::max<int64_t>(1, kGrainSize / D), [&](int64_t b, int64_t e) {
      Walker w(ks, kx, ko);
      w.seek(b);
      for (int64_t i = b; i < e; ++i, w.next()) {
        A best;
        int64_t at;
        arg_scan<IsMax>(p + w.off0(), sd, 0, D, best, at);
        o[w.off1()] = at;
      }
    });
    return;
  }
  Walker w(ks, kx, ko);
  w.seek(0);
  for (int64_t i = 0; i < O; ++i, w.next()) {
    std::unique_ptr<A[]> best(new A[kMaxChunks]);
    std::vector<int64_t> at(kMaxChunks);
    int k = run_chunks(D, kGrainSize, [&](int c, int64_t b, int64_t e) {
      arg_scan<IsMax>(p + w.off0(), sd, b, e, best[c], at[c]);
    });
    // Chunks are in index order, so keeping the earlier one on ties keeps the first index.
    A bv = best[0];
    int64_t bi = at[0];
    for (int c = 1; c < k; ++c)
      if (better<IsMax>(best[c], bv)) { bv = best[c]; bi = at[c]; }
    o[w.off1()] = bi;
  }
}

// kind max or min, out i64, dim wrapped and not of size 0: core/ops/reduce.cc's checks.
void arg_reduce_kernel(ReduceKind kind, Tensor& out, const Tensor& x, int64_t dim) {
  const bool is_max = kind == ReduceKind::max;
  const char* name = is_max ? "argmax" : "argmin";
  if (out.numel() == 0) return;
  auto run = [&]<class T>(const Tensor& in) {
    if (is_max) arg_reduce_typed<true, T>(out, in, dim);
    else arg_reduce_typed<false, T>(out, in, dim);
  };
  if (!is_floating(x.dtype())) {  // bool and i32 through an i64 copy: the same order, so the same indices
    Tensor x64 = x;
    if (x.dtype() != kInt64) {
      x64 = make_tensor(x.sizes(), kInt64, x.device());
      kernels::copy[x.device()](x64, x);
    }
    return run.template operator()<int64_t>(x64);
  }
  KILN_DISPATCH_FLOATING(x.dtype(), name, [&]<class T>() { run.template operator()<T>(x); });
}

}  // namespace

KILN_REGISTER_KERNEL(arg_reduce, DeviceType::CPU, &arg_reduce_kernel);

}  // namespace kiln::cpu
