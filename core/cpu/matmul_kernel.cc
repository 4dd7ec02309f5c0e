// CPU batched matrix multiply: out[b] = a[b] @ b[b] through core/cpu/gemm.h. Each 2-D slice is
// mapped in place as row-major or column-major (a transposed view is column-major) with its
// leading dimension, so transposes and batch broadcasts (stride 0) cost no copy; an operand is
// copied only when neither of its inner strides is 1. A large product is split into one output
// slab per thread of Kiln's pool, each a serial Eigen GEMM; many small ones run in parallel over
// the batch. Large float products (at least kLibraryMinRows rows) go to the GEMM library where one
// is loaded (oneDNN, gemm.h), in row slabs fixed by the product and the machine's cores.
// f16/bf16 compute in f32; integers use a plain loop.
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "core/dense.h"
#include "core/cpu/gemm.h"
#include "core/kernels.h"
#include "core/parallel.h"

namespace kiln::cpu {
namespace {

/// How a [rows, cols] slice with strides (s0, s1) can be read in place.
struct MatLayout {
  bool ok = false;
  bool row_major = true;
  int64_t ld = 0;  // leading dimension (outer stride)
};

MatLayout layout_of(int64_t rows, int64_t cols, int64_t s0, int64_t s1) {
  // A size-1 dim's stride is irrelevant; Eigen wants ld >= the inner size.
  if ((s1 == 1 || cols == 1) && (rows == 1 || s0 >= cols))
    return {true, true, rows == 1 ? std::max<int64_t>(cols, 1) : s0};
  if ((s0 == 1 || rows == 1) && (cols == 1 || s1 >= rows))
    return {true, false, cols == 1 ? std::max<int64_t>(rows, 1) : s1};
  return {};
}

MatLayout layout_of(const Tensor& t) { return layout_of(t.size(1), t.size(2), t.stride(1), t.stride(2)); }

/// c[M, N] (row-major, leading dim ldc) = a[M, K] @ b[K, N] (float picks its ISA at run time).
template <class T>
void gemm(T* c, int64_t ldc, const T* a, MatLayout la, const T* b, MatLayout lb, int64_t M, int64_t N, int64_t K) {
  cpu::gemm<T>(M, N, K, {a, la.row_major, la.ld}, {b, lb.row_major, lb.ld}, c, ldc, /*accumulate=*/false);
}

// Multiply-adds one thread should get before another is woken. Kiln's pool keeps workers
// spinning briefly between regions, so a wake-up is cheap; 64k was the best of 2^16..2^19 on
// core_bench's small shapes.
constexpr int64_t kGemmGrain = int64_t{1} << 16;

/// A float product through the GEMM library (gemm.h), in row slabs of at least kLibraryMinRows / 2
/// rows, one per usable core at most. The slabs depend on the product and the machine's cores,
/// not on the thread count: each is the same library call whichever thread runs it, so the
/// bits are the same at any thread count (the library's kernels round differently at other slab
/// heights). Fewer threads than slabs run several slabs each.
void library_product(float* c, int64_t ldc, const float* a, MatLayout la, const float* b, MatLayout lb, int64_t M,
                     int64_t N, int64_t K) {
  static const int64_t cores = usable_cores();
  const int64_t slabs = std::clamp<int64_t>(M / (kLibraryMinRows / 2), 1, cores);
  const int64_t step = ((M + slabs - 1) / slabs + 15) / 16 * 16;
  parallel_for(0, slabs, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t s = lo; s < hi; ++s) {
      const int64_t r0 = s * step, r1 = std::min(M, r0 + step);
      if (r0 >= r1) continue;
      sgemm_library_run(r1 - r0, N, K, {a + (la.row_major ? r0 * la.ld : r0), la.row_major, la.ld},
                        {b, lb.row_major, lb.ld}, c + r0 * ldc, ldc, /*accumulate=*/false);
    }
  });
}

template <class T> void bmm_eigen(Tensor& out, const Tensor& a0, const Tensor& b0) {
  Tensor a = a0, b = b0;
  MatLayout la = layout_of(a), lb = layout_of(b);
  if (!la.ok) { a = dense_as(a, a.dtype()); la = layout_of(a); }
  if (!lb.ok) { b = dense_as(b, b.dtype()); lb = layout_of(b); }
  const int64_t B = out.size(0), M = out.size(1), N = out.size(2), K = a.size(2);
  MatLayout lc = layout_of(out);
  const bool direct = lc.ok && lc.row_major;
  Tensor c = direct ? out : make_tensor(out.sizes(), out.dtype(), out.device());
  if (!direct) lc = layout_of(c);
  const T* pa = a.data_ptr<T>();
  const T* pb = b.data_ptr<T>();
  T* pc = c.data_ptr<T>();
  const int64_t sa = a.stride(0), sb = b.stride(0), sc = c.stride(0);
  auto one = [&](int64_t i) { gemm<T>(pc + i * sc, lc.ld, pa + i * sa, la, pb + i * sb, lb, M, N, K); };
  const int64_t work = M * N * K;
  const int nt = get_num_threads();
  if constexpr (std::is_same_v<T, float>) {
    if (sgemm_library_takes(M, N, K)) {
      for (int64_t i = 0; i < B; ++i) library_product(pc + i * sc, lc.ld, pa + i * sa, la, pb + i * sb, lb, M, N, K);
      if (!direct) kernels::copy[out.device()](out, c);
      return;
    }
  }
  if (B > 1 && work * nt < kGemmGrain * 8) {
    // Many small products: spread the batch over threads (Eigen runs single-threaded inside a
    // parallel region).
    parallel_for(0, B, std::max<int64_t>(1, kGemmGrain / std::max<int64_t>(work, 1)),
                 [&](int64_t lo, int64_t hi) { for (int64_t i = lo; i < hi; ++i) one(i); });
  } else {
    // Large products: split C into one slab per thread along its longer side, each slab a
    // single-threaded Eigen product, one fork-join per product. (Eigen's own threading
    // busy-waits between panels: when another process takes one of the cores, every product
    // stalls for a scheduler slice.)
    const int slabs = static_cast<int>(std::clamp<int64_t>(work / kGemmGrain, 1, nt));
    for (int64_t i = 0; i < B; ++i) {
      if (slabs == 1) {
        one(i);
        continue;
      }
      // Along M where it gives every slab at least 32 rows: 8-row edges there keep Eigen's panels
      // whole and balance the slabs; along N, whole panels cost up to a panel of imbalance.
      const bool split_n = M < 32 * slabs && N > M;
      const int64_t len = split_n ? N : M;
      // Slab edges keep Eigen's register blocks whole, so every element of C is computed by the
      // same micro-kernel (and so rounds the same) whatever the thread count: Eigen runs a
      // row-major product transposed, in panels of mr = 3 packets along N (24 floats with AVX2,
      // 48 with AVX-512; 12 and 24 doubles) and of nr columns along M. An edge inside a panel
      // would move the elements beside it into a narrower kernel that sums in another order.
      const int64_t align = split_n ? 48 : 8;
      const int64_t step = ((len + slabs - 1) / slabs + align - 1) / align * align;
      parallel_for(0, slabs, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t sidx = lo; sidx < hi; ++sidx) {
          const int64_t s0 = sidx * step, s1 = std::min(len, s0 + step);
          if (s0 >= s1) continue;
          const T* A = pa + i * sa;
          const T* Bm = pb + i * sb;
          T* C = pc + i * sc;
          if (split_n) {
            gemm<T>(C + s0, lc.ld, A, la, Bm + (lb.row_major ? s0 : s0 * lb.ld), lb, M, s1 - s0, K);
          } else {
            gemm<T>(C + s0 * lc.ld, lc.ld, A + (la.row_major ? s0 * la.ld : s0), la, Bm, lb, s1 - s0, N, K);
          }
        }
      });
    }
  }
  if (!direct) kernels::copy[out.device()](out, c);
}

/// Integer GEMM (wrapping arithmetic, as PyTorch): i-k-j order so the inner loop runs along a
/// row of b and of out.
template <class T> void bmm_naive(Tensor& out, const Tensor& a, const Tensor& b) {
  const int64_t B = out.size(0), M = out.size(1), N = out.size(2), K = a.size(2);
  const T* pa = a.data_ptr<T>();
  const T* pb = b.data_ptr<T>();
  T* pc = out.data_ptr<T>();
  const int64_t a0 = a.stride(0), a1 = a.stride(1), a2 = a.stride(2);
  const int64_t b0 = b.stride(0), b1 = b.stride(1), b2 = b.stride(2);
  const int64_t c0 = out.stride(0), c1 = out.stride(1), c2 = out.stride(2);
  parallel_for(0, B * M, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(N * K, 1)), [&](int64_t lo, int64_t hi) {
    std::vector<T> row(N);
    for (int64_t r = lo; r < hi; ++r) {
      const int64_t bi = r / M, i = r % M;
      std::fill(row.begin(), row.end(), T(0));
      for (int64_t k = 0; k < K; ++k) {
        const T aik = pa[bi * a0 + i * a1 + k * a2];
        const T* brow = pb + bi * b0 + k * b1;
        if (b2 == 1) for (int64_t j = 0; j < N; ++j) row[j] += aik * brow[j];
        else for (int64_t j = 0; j < N; ++j) row[j] += aik * brow[j * b2];
      }
      T* crow = pc + bi * c0 + i * c1;
      for (int64_t j = 0; j < N; ++j) crow[j * c2] = row[j];
    }
  });
}

void bmm_kernel(Tensor& out, const Tensor& a, const Tensor& b) {
  KILN_CHECK(a.dim() == 3 && b.dim() == 3 && out.dim() == 3, "bmm: expected 3-D operands, got {}, {} and out {}",
             a.sizes(), b.sizes(), out.sizes());
  KILN_CHECK(a.dtype() == b.dtype() && a.dtype() == out.dtype(), "bmm: dtypes differ ({}, {}, out {})", a.dtype(),
             b.dtype(), out.dtype());
  if (out.numel() == 0) return;
  if (a.size(2) == 0) {  // an empty inner dimension: the sum of nothing
    kernels::fill[out.device()](out, 0);
    return;
  }
  switch (a.dtype()) {
    case DType::f32: return bmm_eigen<float>(out, a, b);
    case DType::f64: return bmm_eigen<double>(out, a, b);
    case DType::f16:
    case DType::bf16: {
      Tensor c = make_tensor(out.sizes(), kFloat32, out.device());
      bmm_eigen<float>(c, dense_as(a, kFloat32), dense_as(b, kFloat32));
      kernels::copy[out.device()](out, c);
      return;
    }
    case DType::i32: return bmm_naive<int32_t>(out, a, b);
    case DType::i64: return bmm_naive<int64_t>(out, a, b);
    default: fail("bmm: dtype {} is not supported", a.dtype());
  }
}

}  // namespace

KILN_REGISTER_KERNEL(bmm, DeviceType::CPU, &bmm_kernel);

}  // namespace kiln::cpu
