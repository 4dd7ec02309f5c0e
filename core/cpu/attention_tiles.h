// The pieces the CPU flash-attention kernels share (attention_kernels.cc: forward,
// attention_backward_kernels.cc: backward; core/ops/attention.h has the contract): tile sizes,
// strided operands, the mask and dropout readers, per-thread scratch and head copies, causal
// bands, and the conversion of operands to the compute dtype.
//
// The products are gemm.h's small_gemm: on AVX-512 CPUs a kernel that packs nothing (a general
// GEMM packs both operands, which at these sizes costs about as much as the multiplies), and
// that skips what causal attention masks, to within 6 rows by 16 columns, instead of computing
// whole blocks and masking them. Its b operand is read row by row, so K^T, Q^T and dO^T are
// transposed once per head, and b operands whose rows lie far apart (heads sliced from a qkv
// projection) copied to contiguous rows (per thread, kept while the next task is on the same head).
// q, k, v, the output, its gradient and the gradients of q, k, v are read and written through
// their strides (the last dim's is 1: attention_4d's contract), so a model's [B, T, H, D] heads,
// sliced out of one qkv projection, reach the kernel without a copy.
// Row operations are Eigen arrays (vectorised exp). f16/bf16 compute in f32.
#pragma once

#include <Eigen/Core>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/cpu/gemm.h"
#include "core/cpu/scratch.h"
#include "core/cpu/transpose_rows.h"
#include "core/dense.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/ops/attention.h"
#include "core/tensor.h"

namespace kiln::cpu::attention_cpu {

constexpr int64_t kBr = 64;            // forward: queries per task
constexpr int64_t kKeyChunk = 512;     // forward: keys per scores GEMM
constexpr int64_t kBc = 64;            // backward: keys per block
constexpr int64_t kQueryChunk = 1024;  // backward: queries per GEMM
constexpr int64_t kOnePassHeads = 16;  // backward: heads (B x H) from which each head is one task

template <class T> using Arr = Eigen::Array<T, Eigen::Dynamic, 1>;
/// Scratch tiles (scratch.h's slots) are aligned to Eigen's packets: where a row starts decides
/// which elements take the scalar path of exp and sum, and so the last bits of the result.
/// Aligned (and every row of a tile starting at a multiple of 16 elements), the result does not
/// depend on which thread (or allocation) ran the tile.
template <class T> using RowMap = Eigen::Map<Arr<T>>;
template <class T> using ConstRowMap = Eigen::Map<const Arr<T>>;

/// Row stride of a scratch tile holding n columns: n rounded up to an odd number of 16-element
/// (64-byte) lines. Odd, so that a tile's rows fall in different cache sets: at a power-of-two
/// stride (256 keys: 1 KiB) the rows a product walks down share a quarter of the L1's sets and
/// evict each other.
inline int64_t padded(int64_t n) {
  const int64_t lines = (n + 15) / 16;
  return (lines | 1) * 16;
}

/// The kernel's per-thread scratch (core/cpu/scratch.h), reused from call to call (a few hundred
/// KiB per thread, a few MiB at T = 4096). Contents unspecified: every element is written before
/// it is read.
enum class Slot { kScores, kOut, kKeep, kDropped, kHeadA, kHeadB, kHeadC, kHeadD, kHeadE, kCount };
static_assert(static_cast<int>(Slot::kCount) <= kScratchSlots);
template <class T> inline T* scratch(Slot slot, int64_t n) { return thread_scratch<T>(static_cast<int>(slot), n); }

struct Dims {
  int64_t B, H, Tq, Tk, D, Dv;
};

/// A [B, H, T, D] operand by its strides (in elements; the last dim's is 1): row(b, h, t) is
/// where row t of head (b, h) starts, and rows are `st` apart (a GEMM's leading dim).
template <class T> struct Heads {
  T* data;
  int64_t sb, sh, st;
  T* row(int64_t b, int64_t h, int64_t t) const { return data + b * sb + h * sh + t * st; }
};

template <class T> Heads<T> heads_of(const Tensor& x) {
  return {x.data_ptr<std::remove_const_t<T>>(), x.stride(0), x.stride(1), x.stride(2)};
}

/// Reads the mask (any strides) as additive values (0 or -inf for bool).
template <class T> struct MaskReader {
  const Tensor* mask = nullptr;
  bool is_bool = false;
  const void* base = nullptr;
  int64_t sb = 0, sh = 0, si = 0, sj = 0;

  explicit MaskReader(const Tensor& m) {
    if (!m.defined()) return;
    mask = &m;
    is_bool = m.dtype() == kBool;
    base = m.data_ptr();
    sb = m.stride(0), sh = m.stride(1), si = m.stride(2), sj = m.stride(3);
  }
  /// row[c] += mask(b, h, i0 + c * di, j0 + c * dj) for c < n: along keys (di 0, dj 1) or along
  /// queries (di 1, dj 0).
  void add(T* row, int64_t b, int64_t h, int64_t i0, int64_t j0, int64_t di, int64_t dj, int64_t n) const {
    const int64_t o = b * sb + h * sh + i0 * si + j0 * sj, step = di * si + dj * sj;
    if (is_bool) {
      const bool* m = static_cast<const bool*>(base) + o;
      for (int64_t c = 0; c < n; ++c)
        if (!m[c * step]) row[c] = -std::numeric_limits<T>::infinity();
    } else {
      const T* m = static_cast<const T*>(base) + o;
      if (step == 1) RowMap<T>(row, n) += ConstRowMap<T>(m, n);
      else for (int64_t c = 0; c < n; ++c) row[c] += m[c * step];
    }
  }
};

/// keep[c] = the dropout keep factor (0 or 1 / (1 - p)) of element e0 + c * step, c < n.
template <class T>
void dropout_keep(T* keep, const AttentionParams& p, uint32_t thr, int64_t e0, int64_t step, int64_t n) {
  const T inv = T(1) / static_cast<T>(1.0 - p.dropout_p);
  if (step != 1) {
    for (int64_t c = 0; c < n; ++c) {
      const uint64_t e = static_cast<uint64_t>(e0 + c * step);
      keep[c] = philox4x32(p.seed, p.offset + e / 4)[e % 4] >= thr ? inv : T(0);
    }
    return;
  }
  int64_t c = 0;
  while (c < n) {
    const uint64_t e = static_cast<uint64_t>(e0 + c);
    const auto w = philox4x32(p.seed, p.offset + e / 4);
    for (uint64_t k = e % 4; k < 4 && c < n; ++k, ++c) keep[c] = w[k] >= thr ? inv : T(0);
  }
}

/// A per-thread copy of one head of x ([T, D] rows), kept while the next task is on the same head
/// (its next query or key block), as small_gemm's b operand, which it reads row by row:
/// - transposed: [D, T] with row stride ld, row e holding element e of every row (for a product
///   with x^T);
/// - or the rows themselves, ld apart: a model's heads sliced from a [B, T, 3C] projection have
///   their rows 3C apart, each on another page, where the hardware prefetcher stops; copied,
///   they are contiguous. Rows already dense (stride D) are used in place.
template <class T> struct HeadCopy {
  Slot slot;
  bool transposed;
  const T* data = nullptr;
  int64_t bh = -1, ld = 0;

  const T* get(const Heads<const T>& x, int64_t bh_, int64_t H, int64_t rows, int64_t D) {
    if (bh_ == bh) return data;
    bh = bh_;
    const int64_t b = bh / H, h = bh % H;
    if (!transposed && x.st == D) {
      ld = D;
      return data = x.row(b, h, 0);
    }
    if (!transposed) {
      ld = D;
      T* t = scratch<T>(slot, rows * D);
      for (int64_t c = 0; c < rows; ++c) std::copy_n(x.row(b, h, c), D, t + c * D);
      return data = t;
    }
    ld = padded(rows);
    T* t = scratch<T>(slot, D * ld);
    transpose_rows(x.row(b, h, 0), x.st, rows, D, t, ld);
    return data = t;
  }
};

/// Causal attention's band of a [queries, keys] tile whose first query is i0 and first key j0:
/// row r sees the keys up to r + i0 - j0.
inline Band keys_seen(bool causal, int64_t i0, int64_t j0) { return causal ? Band{-Band::kAll, i0 - j0} : Band{}; }
/// The same for a [keys, queries] tile: row c is seen by the queries from c + j0 - i0 on.
inline Band queries_seeing(bool causal, int64_t i0, int64_t j0) {
  return causal ? Band{j0 - i0, Band::kAll} : Band{};
}

inline DType compute_dtype(DType t) {
  KILN_CHECK(is_floating(t), "scaled_dot_product_attention: dtype {} is not supported (floating types only)", t);
  return t == kFloat64 ? kFloat64 : kFloat32;
}

inline Dims dims_of(const Tensor& q, const Tensor& k, const Tensor& v) {
  return {q.size(0), q.size(1), q.size(2), k.size(2), q.size(3), v.size(3)};
}

/// The mask in the compute dtype (bool masks as they are).
inline Tensor mask_as(const Tensor& mask, DType cd) {
  if (!mask.defined() || mask.dtype() == kBool || mask.dtype() == cd) return mask;
  return mask.to(cd);
}

/// An operand as the kernel reads it: itself in the compute dtype (with the strides attention_4d
/// allows), else a contiguous copy converted to it.
inline Tensor readable_as(const Tensor& t, DType cd) { return !t.defined() || t.dtype() == cd ? t : dense_as(t, cd); }
/// Where the kernel writes `out`: itself in the compute dtype (any strides with a unit last one),
/// else a contiguous tensor in it that write_back converts into `out`.
inline Tensor written_as(const Tensor& out, DType cd) {
  if (!out.defined() || out.dtype() == cd) return out;
  return make_tensor(out.sizes(), cd, out.device());
}

}  // namespace kiln::cpu::attention_cpu
