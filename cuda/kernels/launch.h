// The interface between the host side of the CUDA kernels (cuda/*.cc, compiled by g++, which
// unpacks Tensors) and the .cu launchers (compiled by nvcc, which never see a Tensor, fmt or
// Eigen): plain geometry structs, dtype codes and the op kinds. Every launcher queues work on
// the stream it is given and returns at once.
#pragma once

#include <cstdint>

#include "core/op_kinds.h"

struct CUstream_st;

namespace kiln::cuda::kern {

/// Dims an elementwise operand may have after coalescing (core tensors rarely exceed 6).
inline constexpr int kMaxDims = 10;

/// kiln::DType's values (checked by a static_assert on the host side).
enum class ScalarType : int8_t { b8, i32, i64, f16, bf16, f32, f64 };

/// N operands (0 is the output) of one shape; strides in elements, dims coalesced.
template <int N> struct ElementwiseArgs {
  int ndim = 0;
  int64_t numel = 0;
  bool contiguous = false;  ///< every operand dense in order (ndim <= 1, strides 1)
  int64_t sizes[kMaxDims] = {};
  int64_t strides[N][kMaxDims] = {};
  void* data[N] = {};
};

/// out = value (given as double and int64: the launcher takes the one out's type needs).
void launch_fill(ScalarType out, const ElementwiseArgs<1>& a, double dvalue, int64_t ivalue, CUstream_st* stream);
/// out = src converted to out's type as the CPU copy kernel converts.
void launch_copy(ScalarType out, ScalarType src, const ElementwiseArgs<2>& a, CUstream_st* stream);
/// out = op(x); out and x share `type`.
void launch_unary(const UnaryOp& op, ScalarType type, const ElementwiseArgs<2>& a, CUstream_st* stream);
/// Operands out (grad_x), grad_y, saved: grad_x = the row's grad column; one floating `type`.
void launch_unary_backward(const UnaryOp& op, ScalarType type, const ElementwiseArgs<3>& a, CUstream_st* stream);
/// out = kind(a, b); all three share `type`.
void launch_binary(BinaryKind kind, ScalarType type, const ElementwiseArgs<3>& a, CUstream_st* stream);

/// out (bool) = kind(a, b); a and b share `type`.
void launch_compare(CompareKind kind, ScalarType type, const ElementwiseArgs<3>& a, CUstream_st* stream);
/// out = cond ? a : b (operands 0..3: out, cond (bool), a, b); moves elements of `elem_bytes`.
void launch_where(int elem_bytes, const ElementwiseArgs<4>& a, CUstream_st* stream);
/// out[i] = start + i * step for a contiguous out of n elements (computed in double, as the CPU).
void launch_arange(ScalarType type, void* out, int64_t n, double start, double step, CUstream_st* stream);

/// Random fills of a contiguous `out` of n elements: element i draws from Philox counter
/// (offset + i) under `seed`, exactly as core/cpu/random_kernels.cc, so a seed gives the same
/// values on the GPU as on the CPU (normals up to the last bits of log/cos).
void launch_uniform(ScalarType type, void* out, int64_t n, uint64_t seed, uint64_t offset, double low, double high,
                    CUstream_st* stream);
void launch_normal(ScalarType type, void* out, int64_t n, uint64_t seed, uint64_t offset, double mean, double std,
                   CUstream_st* stream);
void launch_randint(ScalarType type, void* out, int64_t n, uint64_t seed, uint64_t offset, int64_t low,
                    int64_t high, CUstream_st* stream);
void launch_bernoulli(ScalarType type, void* out, int64_t n, uint64_t seed, uint64_t offset, double p,
                      CUstream_st* stream);

/// Indexed reads and adds. Operands: 0 the tensor walked in order, 1 the i64 index, 2 the other
/// tensor; sizes are the walk's shape, strides in elements with the indexed dim's stride of the
/// indexed tensor taken out (passed as `dim_stride`) and the index's strides arranged so that
/// its value for a position is at offset strides[1] (index_select/index_add give it stride 0
/// outside the dim).
/// gather form: data[0][o0] = data[2][o2 + index * dim_stride], any dtype by element width.
void launch_index_gather(int elem_bytes, const ElementwiseArgs<3>& a, int64_t dim_stride, CUstream_st* stream);
/// scatter-add form: data[0][o0 + index * dim_stride] += data[2][o2] (atomic; not bool).
void launch_index_scatter_add(ScalarType type, const ElementwiseArgs<3>& a, int64_t dim_stride, CUstream_st* stream);

/// 2-D pooling over `planes` contiguous H x W input planes into OH x OW outputs, geometry as
/// Pool2dParams; the same window order, NaN rule and divisors as core/cpu/pool_kernels.cc.
struct PoolShape {
  int64_t planes, H, W, OH, OW;
};
void launch_max_pool2d(ScalarType type, const void* x, void* out, int64_t* indices, const PoolShape& s,
                       const Pool2dParams& p, CUstream_st* stream);
/// grad_x_acc (f32 for 16-bit types, else the type itself; zeroed by the caller) += grad_out at
/// each output's index.
void launch_max_pool2d_backward(ScalarType type, const void* grad_out, const int64_t* indices, void* grad_x_acc,
                                int64_t planes, int64_t in_per_plane, int64_t out_per_plane, CUstream_st* stream);
void launch_avg_pool2d(ScalarType type, const void* x, void* out, const PoolShape& s, const Pool2dParams& p,
                       CUstream_st* stream);
void launch_avg_pool2d_backward(ScalarType type, const void* grad_out, void* grad_x, const PoolShape& s,
                                const Pool2dParams& p, CUstream_st* stream);

/// Mixed precision's unscale: g[i] *= inv_scale over a contiguous gradient of n elements, and
/// *found_inf = 1.0f if any element was inf or NaN (left alone otherwise).
void launch_non_finite_check_and_unscale(ScalarType type, void* grad, int64_t n, float* found_inf, double inv_scale,
                                         CUstream_st* stream);

/// Splits of a row reduction: each row of R elements is cut into this many chunks reduced in
/// parallel (partials then reduced per row), so few long rows still fill the GPU.
inline int64_t reduce_chunks(int64_t rows, int64_t R) {
  constexpr int64_t kTargetWarps = 16384, kMinChunk = 2048;
  if (rows >= kTargetWarps || R <= kMinChunk) return 1;
  int64_t c = (kTargetWarps + rows - 1) / rows;
  const int64_t max_c = (R + kMinChunk - 1) / kMinChunk;
  return c < max_c ? c : max_c;
}

/// Splits of a column reduction ([A, R, C] over R): enough chunks of R (of at least 32 rows) to
/// give ~256k threads, so a wide but short output (sum(0) of a matrix) still fills the GPU.
inline int64_t reduce_column_chunks(int64_t columns, int64_t R) {
  constexpr int64_t kTargetThreads = 262144, kMinRows = 32;
  if (columns >= kTargetThreads || R <= kMinRows) return 1;
  int64_t c = (kTargetThreads + columns - 1) / columns;
  const int64_t max_c = (R + kMinRows - 1) / kMinRows;
  c = c < max_c ? c : max_c;
  return c < 65535 ? c : 65535;  // the grid's z extent
}

/// out[a, c] = kind over x[a, 0..R, c] for a contiguous [A, R, C] x; out is A * C contiguous
/// values; `partials` holds A * C * reduce_column_chunks(A * C, R) 8-byte values (unused when
/// that is 1). Accumulation and NaN rules as launch_reduce.
void launch_reduce_columns(ReduceKind kind, ScalarType in, ScalarType out, const void* x, void* out_ptr,
                           int64_t outer, int64_t R, int64_t C, void* partials, CUstream_st* stream);

/// out[r] = kind over x[r, 0..R) for a contiguous [rows, R] x; out is `rows` contiguous values.
/// `partials` holds rows * reduce_chunks(rows, R) 8-byte values (unused when that is 1). Sums
/// and products accumulate in float for 16-bit floats and f32, double for f64, int64 for
/// integers and bool; max/min propagate NaN; mean divides by R.
void launch_reduce(ReduceKind kind, ScalarType in, ScalarType out, const void* x, void* out_ptr, int64_t rows,
                   int64_t R, void* partials, CUstream_st* stream);

/// out[r] (i64) = index of the max (or min) of x[r, 0..D) for contiguous [rows, D] x: the first
/// one on ties; a NaN counts as the extreme (the first NaN wins).
void launch_arg_reduce(bool is_max, ScalarType type, const void* x, int64_t* out, int64_t rows, int64_t D,
                       CUstream_st* stream);

/// out[r, :] (i64) = the stable sort order of x[r, 0..n) for contiguous [rows, n] x (NaN largest).
void launch_argsort(ScalarType type, const void* x, int64_t* out, int64_t rows, int64_t n, bool descending,
                    CUstream_st* stream);

/// y[r] = softmax (or log_softmax) of x[r, 0..D) for contiguous [rows, D] x and y of one type
/// (computed in float, double for f64).
void launch_softmax(ScalarType type, const void* x, void* y, int64_t rows, int64_t D, bool log, CUstream_st* stream);
/// gx from gy and the forward output y, all contiguous [rows, D] of one type.
void launch_softmax_backward(ScalarType type, const void* gy, const void* y, void* gx, int64_t rows, int64_t D,
                             bool log, CUstream_st* stream);

}  // namespace kiln::cuda::kern
