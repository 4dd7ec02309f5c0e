// Reductions on CUDA (sum, mean, max, min, prod). Rows: a contiguous [rows, R] input, a warp
// per (row, chunk) with shuffles; long rows are split into chunks whose partials a second pass
// reduces, so a full reduction of one long row still fills the GPU. Columns: a contiguous
// [A, R, C] input reduced over R (leading dims: sum(0) of a matrix), a thread per column and
// chunk of R, partials again reduced by the row kernel. The host side (cuda/reduce.cc) picks one.
#include <cstdint>
#include <limits>

#include "cuda/kernels/dtypes.cuh"

namespace kiln::cuda::kern {
namespace {

template <class T> struct AccOf { using type = opmath_t<T>; };
template <> struct AccOf<bool> { using type = int64_t; };
template <> struct AccOf<int32_t> { using type = int64_t; };
template <> struct AccOf<float> { using type = double; };  // as the CPU: f32 sums in double

template <class A> __device__ __forceinline__ A identity(ReduceKind k) {
  switch (k) {
    case ReduceKind::prod: return A(1);
    case ReduceKind::max:
      return std::numeric_limits<A>::has_infinity ? -std::numeric_limits<A>::infinity()
                                                  : std::numeric_limits<A>::lowest();
    case ReduceKind::min:
      return std::numeric_limits<A>::has_infinity ? std::numeric_limits<A>::infinity()
                                                  : std::numeric_limits<A>::max();
    default: return A(0);
  }
}

template <class A> __device__ __forceinline__ A step(ReduceKind k, A a, A v) {
  switch (k) {
    case ReduceKind::prod: return a * v;
    case ReduceKind::max: return (v > a || v != v) ? v : a;  // a NaN wins and stays
    case ReduceKind::min: return (v < a || v != v) ? v : a;
    default: return a + v;
  }
}

/// One warp per (row, chunk): folds x[row, c*chunk .. min(R, (c+1)*chunk)) and writes either the
/// finished value (Out) or a partial (A) at out[row * chunks + c].
template <class In, class A, class Out>
__global__ void reduce_kernel(ReduceKind kind, const In* x, int64_t rows, int64_t R, int64_t chunks, int64_t chunk,
                              void* out, bool finish, int64_t divisor) {
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= rows * chunks) return;
  const int64_t row = warp / chunks, c = warp % chunks;
  const int64_t b = c * chunk, e = b + chunk < R ? b + chunk : R;
  const In* p = x + row * R;
  A acc = identity<A>(kind);
  for (int64_t i = b + lane; i < e; i += 32) acc = step(kind, acc, static_cast<A>(to_math(p[i])));
#pragma unroll
  for (int off = 16; off > 0; off /= 2) acc = step(kind, acc, __shfl_down_sync(0xffffffffu, acc, off));
  if (lane != 0) return;
  if (!finish) {
    static_cast<A*>(out)[warp] = acc;
    return;
  }
  if (kind == ReduceKind::mean) acc = acc / static_cast<A>(divisor);
  Out* o = static_cast<Out*>(out);
  if constexpr (std::is_same_v<Out, bool>) o[warp] = acc != A(0);
  else o[warp] = from_math<Out>(static_cast<opmath_t<Out>>(acc));
}

template <class In, class A, class Out>
void run_reduce(ReduceKind kind, const In* x, void* out, int64_t rows, int64_t R, void* partials, cudaStream_t s) {
  constexpr int kThreads = 256, kWarps = kThreads / 32;
  const int64_t chunks = reduce_chunks(rows, R);
  const int64_t chunk = (R + chunks - 1) / chunks;
  const int64_t items = rows * chunks;
  const unsigned grid = static_cast<unsigned>((items + kWarps - 1) / kWarps);
  if (chunks == 1) {
    reduce_kernel<In, A, Out><<<grid, kThreads, 0, s>>>(kind, x, rows, R, 1, R, out, true, R);
    return;
  }
  reduce_kernel<In, A, Out><<<grid, kThreads, 0, s>>>(kind, x, rows, R, chunks, chunk, partials, false, R);
  const unsigned grid2 = static_cast<unsigned>((rows + kWarps - 1) / kWarps);
  reduce_kernel<A, A, Out><<<grid2, kThreads, 0, s>>>(kind, static_cast<const A*>(partials), rows, chunks, 1, chunks,
                                                      out, true, R);
}

/// Column reduction of a contiguous [A, R, C] input over R: a thread per (a, c, chunk of R), the
/// threads of a warp on neighbouring columns (coalesced), four rows in flight. Writes the finished
/// value at out[a * C + c] (chunks == 1) or a partial at out[(a * C + c) * chunks + chunk].
template <class In, class A, class Out>
__global__ void reduce_columns_kernel(ReduceKind kind, const In* x, int64_t outer, int64_t R, int64_t C,
                                      int64_t chunks, int64_t chunk, void* out) {
  const int64_t col = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t a = blockIdx.y, c = blockIdx.z;
  if (col >= C || a >= outer) return;
  const int64_t b = c * chunk, e = b + chunk < R ? b + chunk : R;
  const In* p = x + a * R * C + col;
  A acc = identity<A>(kind), acc1 = acc, acc2 = acc, acc3 = acc;
  int64_t r = b;
  for (; r + 3 < e; r += 4) {
    const A v0 = static_cast<A>(to_math(p[r * C])), v1 = static_cast<A>(to_math(p[(r + 1) * C]));
    const A v2 = static_cast<A>(to_math(p[(r + 2) * C])), v3 = static_cast<A>(to_math(p[(r + 3) * C]));
    acc = step(kind, acc, v0);
    acc1 = step(kind, acc1, v1);
    acc2 = step(kind, acc2, v2);
    acc3 = step(kind, acc3, v3);
  }
  for (; r < e; ++r) acc = step(kind, acc, static_cast<A>(to_math(p[r * C])));
  acc = step(kind, step(kind, acc, acc1), step(kind, acc2, acc3));
  const int64_t o = a * C + col;
  if (chunks > 1) {
    static_cast<A*>(out)[o * chunks + c] = acc;
    return;
  }
  if (kind == ReduceKind::mean) acc = acc / static_cast<A>(R);
  Out* y = static_cast<Out*>(out);
  if constexpr (std::is_same_v<Out, bool>) y[o] = acc != A(0);
  else y[o] = from_math<Out>(static_cast<opmath_t<Out>>(acc));
}

template <class In, class A, class Out>
void run_reduce_columns(ReduceKind kind, const In* x, void* out, int64_t outer, int64_t R, int64_t C, void* partials,
                        cudaStream_t s) {
  constexpr int kThreads = 256, kWarps = kThreads / 32;
  const int64_t chunks = reduce_column_chunks(outer * C, R);
  const int64_t chunk = (R + chunks - 1) / chunks;
  const dim3 grid(static_cast<unsigned>((C + kThreads - 1) / kThreads), static_cast<unsigned>(outer),
                  static_cast<unsigned>(chunks));
  reduce_columns_kernel<In, A, Out><<<grid, kThreads, 0, s>>>(kind, x, outer, R, C, chunks, chunk,
                                                               chunks > 1 ? partials : out);
  if (chunks == 1) return;
  const int64_t rows = outer * C;
  const unsigned grid2 = static_cast<unsigned>((rows + kWarps - 1) / kWarps);
  reduce_kernel<A, A, Out><<<grid2, kThreads, 0, s>>>(kind, static_cast<const A*>(partials), rows, chunks, 1, chunks,
                                                      out, true, R);
}

/// A warp per row: each lane keeps the best of its strided elements (the first on ties, since a
/// lane visits its indices in order), then the warp merges preferring the lower index on ties.
template <class T>
__global__ void arg_reduce_kernel(bool is_max, const T* x, int64_t* out, int64_t rows, int64_t D) {
  using M = opmath_t<T>;
  const int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const T* p = x + row * D;
  M best = to_math(p[lane < D ? lane : 0]);
  int64_t at = lane < D ? lane : D;  // D: "none" (loses every merge)
  for (int64_t i = lane + 32; i < D; i += 32) {
    const M v = to_math(p[i]);
    const bool nan_best = best != best;
    if (!nan_best && (v != v || (is_max ? v > best : v < best))) {
      best = v;
      at = i;
    }
  }
#pragma unroll
  for (int off = 16; off > 0; off /= 2) {
    const M ob = __shfl_down_sync(0xffffffffu, best, off);
    const int64_t oa = __shfl_down_sync(0xffffffffu, at, off);
    if (oa >= D) continue;
    if (at >= D) {
      best = ob;
      at = oa;
      continue;
    }
    const bool bn = best != best, on = ob != ob;
    bool take;
    if (bn || on) take = on && (!bn || oa < at);
    else if (ob == best) take = oa < at;
    else take = is_max ? ob > best : ob < best;
    if (take) {
      best = ob;
      at = oa;
    }
  }
  if (lane == 0) out[row] = at;
}

}  // namespace

void launch_arg_reduce(bool is_max, ScalarType type, const void* x, int64_t* out, int64_t rows, int64_t D,
                       CUstream_st* stream) {
  constexpr int kThreads = 256, kWarps = kThreads / 32;
  const unsigned grid = static_cast<unsigned>((rows + kWarps - 1) / kWarps);
  dispatch_all(type, [&]<class T>() {
    arg_reduce_kernel<T><<<grid, kThreads, 0, stream>>>(is_max, static_cast<const T*>(x), out, rows, D);
  });
}

void launch_reduce(ReduceKind kind, ScalarType in, ScalarType out, const void* x, void* out_ptr, int64_t rows,
                   int64_t R, void* partials, CUstream_st* stream) {
  dispatch_all(in, [&]<class T>() {
    using A = typename AccOf<T>::type;
    if (out == in) {
      run_reduce<T, A, T>(kind, static_cast<const T*>(x), out_ptr, rows, R, partials, stream);
    } else if constexpr (std::is_integral_v<T>) {
      run_reduce<T, A, int64_t>(kind, static_cast<const T*>(x), out_ptr, rows, R, partials, stream);
    }
  });
}

void launch_reduce_columns(ReduceKind kind, ScalarType in, ScalarType out, const void* x, void* out_ptr,
                           int64_t outer, int64_t R, int64_t C, void* partials, CUstream_st* stream) {
  dispatch_all(in, [&]<class T>() {
    using A = typename AccOf<T>::type;
    if (out == in) {
      run_reduce_columns<T, A, T>(kind, static_cast<const T*>(x), out_ptr, outer, R, C, partials, stream);
    } else if constexpr (std::is_integral_v<T>) {
      run_reduce_columns<T, A, int64_t>(kind, static_cast<const T*>(x), out_ptr, outer, R, C, partials, stream);
    }
  });
}

}  // namespace kiln::cuda::kern
