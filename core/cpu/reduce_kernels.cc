// CPU reductions: sum/mean/max/min/prod over any set of dims, and argmax/argmin along one dim.
// Any strides: reduced dims are ordered last and coalesced. When the innermost reduced dim is
// contiguous, each output folds its contiguous runs with independent (vectorised) accumulators;
// when the innermost kept dim is contiguous, whole rows are accumulated at once (column sums);
// anything else is first copied so that the reduced dims are innermost.
// f32 sums accumulate in double, f16/bf16 in float; integer sums in i64. NaN propagates in max/min.
#if defined(__F16C__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include "core/kernels.h"
#include "core/parallel.h"

namespace kiln::cpu {
namespace {

// ---- per-kind arithmetic -------------------------------------------------------------------

/// What sums and products of T accumulate in.
template <class T> struct SumAcc { using type = std::conditional_t<std::is_integral_v<T>, int64_t, opmath_t<T>>; };
template <> struct SumAcc<float> { using type = double; };

template <ReduceKind K, class T>
using acc_t = std::conditional_t<K == ReduceKind::max || K == ReduceKind::min, opmath_t<T>,
                                 typename SumAcc<T>::type>;

template <ReduceKind K, class A> constexpr A identity() {
  if constexpr (K == ReduceKind::sum || K == ReduceKind::mean) return A(0);
  else if constexpr (K == ReduceKind::prod) return A(1);
  else if constexpr (K == ReduceKind::max)
    return std::numeric_limits<A>::has_infinity ? -std::numeric_limits<A>::infinity()
                                                : std::numeric_limits<A>::lowest();
  else
    return std::numeric_limits<A>::has_infinity ? std::numeric_limits<A>::infinity()
                                                : std::numeric_limits<A>::max();
}

/// a (+, *, max, min) v. For max/min a NaN operand wins and, once in `a`, stays (no comparison
/// with NaN is true).
template <ReduceKind K, class A> inline A step(A a, A v) {
  if constexpr (K == ReduceKind::sum || K == ReduceKind::mean) return a + v;
  else if constexpr (K == ReduceKind::prod) return a * v;
  else if constexpr (K == ReduceKind::max) return ((v > a) | (v != v)) ? v : a;
  else return ((v < a) | (v != v)) ? v : a;
}

template <ReduceKind K> constexpr bool is_minmax = K == ReduceKind::max || K == ReduceKind::min;

/// Widens n 16-bit floats to float (F16C's 8-wide conversion where the CPU has it).
inline void widen(const Half* p, float* out, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i))));
#endif
  for (; i < n; ++i) out[i] = static_cast<float>(p[i]);
}
inline void widen(const BFloat16* p, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(p[i]);
}

// GCC does not vectorise the NaN-propagating select of max/min from scalar code, so those folds
// use vector-extension types (plain compare + blend on AVX2).
template <class A> struct VecOf {
  typedef A type __attribute__((vector_size(32)));  // an alias template would drop the attribute
};
template <class A> using Vec = typename VecOf<A>::type;
template <class A> constexpr int kVecWidth = 32 / sizeof(A);

template <ReduceKind K, class A> inline Vec<A> step_vec(Vec<A> a, Vec<A> v) {
  if constexpr (K == ReduceKind::max) return ((v > a) | (v != v)) ? v : a;
  else return ((v < a) | (v != v)) ? v : a;
}

template <class A> inline Vec<A> load_vec(const A* p) {
  Vec<A> v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

/// acc[j] = step(acc[j], row[j]) for j < n.
template <ReduceKind K, class A> inline void step_row(A* acc, const A* row, int64_t n) {
  int64_t j = 0;
  if constexpr (is_minmax<K> && std::is_floating_point_v<A>) {
    constexpr int W = kVecWidth<A>;
    for (; j + W <= n; j += W) {
      Vec<A> v = step_vec<K, A>(load_vec(acc + j), load_vec(row + j));
      std::memcpy(acc + j, &v, sizeof(v));
    }
  }
  for (; j < n; ++j) acc[j] = step<K, A>(acc[j], row[j]);
}

/// Folds any number of contiguous runs into one result: independent accumulators (16 scalar
/// lanes, or four vectors for max/min) carried across runs so short runs cost little.
template <ReduceKind K, class T, class A, class Enable = void> class Folder {
 public:
  Folder() { std::fill(lane_, lane_ + L, identity<K, A>()); }
  void add(const T* p, int64_t n) {
    int64_t i = 0;
    for (; i + L <= n; i += L)
      for (int l = 0; l < L; ++l) lane_[l] = step<K, A>(lane_[l], static_cast<A>(p[i + l]));
    for (; i < n; ++i) tail_ = step<K, A>(tail_, static_cast<A>(p[i]));
  }
  A result() {
    // Pairwise over the lanes keeps rounding balanced.
    for (int w = L / 2; w >= 1; w /= 2)
      for (int l = 0; l < w; ++l) lane_[l] = step<K, A>(lane_[l], lane_[l + w]);
    return step<K, A>(lane_[0], tail_);
  }

 private:
  static constexpr int L = 16;
  A lane_[L];
  A tail_ = identity<K, A>();
};

/// max/min of floats or doubles: GCC does not vectorise the NaN-propagating select from scalar
/// code, so this uses vector-extension types (compare + blend on AVX2).
template <ReduceKind K, class A>
class Folder<K, A, A, std::enable_if_t<is_minmax<K> && std::is_floating_point_v<A>>> {
 public:
  Folder() {
    for (Vec<A>& v : acc_) v = Vec<A>{} + identity<K, A>();  // broadcast
  }
  void add(const A* p, int64_t n) {
    int64_t i = 0;
    for (; i + 4 * W <= n; i += 4 * W)
      for (int u = 0; u < 4; ++u) acc_[u] = step_vec<K, A>(acc_[u], load_vec(p + i + u * W));
    for (; i + W <= n; i += W) acc_[0] = step_vec<K, A>(acc_[0], load_vec(p + i));
    for (; i < n; ++i) tail_ = step<K, A>(tail_, p[i]);
  }
  A result() const {
    A r = tail_;
    for (int u = 0; u < 4; ++u)
      for (int l = 0; l < W; ++l) r = step<K, A>(r, acc_[u][l]);
    return r;
  }

 private:
  static constexpr int W = kVecWidth<A>;
  Vec<A> acc_[4];
  A tail_ = identity<K, A>();
};

/// f16 (and bf16 for max/min): widen a block at a time, then fold floats.
template <ReduceKind K, class T, class A>
class Folder<K, T, A, std::enable_if_t<std::is_same_v<T, Half> || (std::is_same_v<T, BFloat16> && is_minmax<K>)>> {
 public:
  void add(const T* p, int64_t n) {
    constexpr int64_t kChunk = 512;
    float buf[kChunk];
    for (int64_t i = 0; i < n; i += kChunk) {
      const int64_t len = std::min(kChunk, n - i);
      widen(p + i, buf, len);
      inner_.add(buf, len);
    }
  }
  A result() { return inner_.result(); }

 private:
  Folder<K, float, A> inner_;
};

template <ReduceKind K, class T, class A> A fold_contiguous(const T* p, int64_t n) {
  Folder<K, T, A> f;
  f.add(p, n);
  return f.result();
}

template <ReduceKind K, class A, class To> inline To finish(A acc, int64_t count) {
  if constexpr (K == ReduceKind::mean) return static_cast<To>(acc / static_cast<A>(count));
  else return static_cast<To>(acc);
}

/// Splits [0, n) into up to one chunk per thread (each at least `grain` long), runs
/// f(chunk, begin, end) for each in parallel and returns the number of chunks.
template <class F> int run_chunks(int64_t n, int64_t grain, const F& f) {
  int k = static_cast<int>(std::clamp<int64_t>(n / std::max<int64_t>(grain, 1), 1, get_num_threads()));
  if (k == 1 || in_parallel_region()) {
    f(0, int64_t{0}, n);
    return 1;
  }
  detail::run_chunks(k, [&](int64_t c) { f(static_cast<int>(c), n * c / k, n * (c + 1) / k); });
  return k;
}

// ---- geometry -----------------------------------------------------------------------------

/// A walk over a multi-index (row-major), tracking the element offset into two tensors.
class Walker {
 public:
  Walker(const Shape& sizes, const Shape& s0, const Shape& s1) : sizes_(sizes), s0_(s0), s1_(s1) {}
  void seek(int64_t linear) {
    idx_.assign(sizes_.size(), 0);
    off0_ = off1_ = 0;
    for (int64_t d = static_cast<int64_t>(sizes_.size()) - 1; d >= 0; --d) {
      idx_[d] = linear % sizes_[d];
      linear /= sizes_[d];
      off0_ += idx_[d] * s0_[d];
      off1_ += idx_[d] * s1_[d];
    }
  }
  void next() {
    for (int64_t d = static_cast<int64_t>(sizes_.size()) - 1; d >= 0; --d) {
      off0_ += s0_[d];
      off1_ += s1_[d];
      if (++idx_[d] < sizes_[d]) return;
      off0_ -= idx_[d] * s0_[d];
      off1_ -= idx_[d] * s1_[d];
      idx_[d] = 0;
    }
  }
  int64_t off0() const { return off0_; }
  int64_t off1() const { return off1_; }

 private:
  const Shape& sizes_;
  const Shape& s0_;
  const Shape& s1_;
  std::vector<int64_t> idx_;
  int64_t off0_ = 0, off1_ = 0;
};

/// The kept dims (x strides and out strides) and the reduced dims (x strides) of a reduction,
/// with size-1 dims dropped and neighbours that are contiguous with each other merged.
struct Layout {
  Shape kept, kept_x, kept_out;
  Shape red, red_x;
  int64_t outputs = 1, count = 1;
};

/// Sorts dims by x stride, largest first (the walk order does not change any result: outputs are
/// addressed through their own strides), then merges neighbours contiguous in every stride list.
void sort_and_merge(Shape& sizes, Shape& sx, Shape* so) {
  std::vector<size_t> order(sizes.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return sx[a] > sx[b]; });
  Shape n2, x2, o2;
  for (size_t i : order) {
    if (!n2.empty() && x2.back() == sx[i] * sizes[i] && (!so || o2.back() == (*so)[i] * sizes[i])) {
      n2.back() *= sizes[i];
      x2.back() = sx[i];
      if (so) o2.back() = (*so)[i];
    } else {
      n2.push_back(sizes[i]);
      x2.push_back(sx[i]);
      if (so) o2.push_back((*so)[i]);
    }
  }
  sizes = n2;
  sx = x2;
  if (so) *so = o2;
}

Layout make_layout(const Tensor& out, const Tensor& x, const IntList& dims) {
  const int64_t nd = x.dim();
  std::vector<bool> reduced(nd, false);
  for (int64_t d : dims) reduced[wrap_dim(d, nd, "reduce")] = true;
  Layout L;
  for (int64_t d = 0; d < nd; ++d) {
    const int64_t n = x.sizes()[d];
    (reduced[d] ? L.count : L.outputs) *= n;
    if (n == 1) continue;
    if (reduced[d]) {
      L.red.push_back(n);
      L.red_x.push_back(x.strides()[d]);
    } else {
      L.kept.push_back(n);
      L.kept_x.push_back(x.strides()[d]);
      L.kept_out.push_back(out.strides()[d]);
    }
  }
  sort_and_merge(L.kept, L.kept_x, &L.kept_out);
  sort_and_merge(L.red, L.red_x, nullptr);
  return L;
}

// ---- the three strategies -----------------------------------------------------------------

/// The innermost reduced dim is contiguous: each output folds one or more contiguous runs.
template <ReduceKind K, class T, class To>
void reduce_inner(To* out, const T* x, const Layout& L) {
  using A = acc_t<K, T>;
  const int64_t R = L.count, O = L.outputs;
  const int64_t run = L.red.empty() ? 1 : L.red.back();
  const Shape outer(L.red.begin(), L.red.end() - (L.red.empty() ? 0 : 1));
  const Shape outer_x(L.red_x.begin(), L.red_x.end() - (L.red_x.empty() ? 0 : 1));
  const Shape zeros(outer.size(), 0);
  const int64_t n_runs = shape_numel(outer);
  // Folds runs [rb, re) of the output whose first element is `base`.
  auto fold_runs = [&](const T* base, int64_t rb, int64_t re) {
    if (n_runs == 1) return fold_contiguous<K, T, A>(base, run);
    Walker wr(outer, outer_x, zeros);
    wr.seek(rb);
    Folder<K, T, A> f;
    for (int64_t r = rb; r < re; ++r, wr.next()) f.add(base + wr.off0(), run);
    return f.result();
  };
  if (O >= 2 * get_num_threads() || R < kGrainSize) {
    parallel_for(0, O, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(R, 1)), [&](int64_t b, int64_t e) {
      Walker w(L.kept, L.kept_x, L.kept_out);
      w.seek(b);
      for (int64_t o = b; o < e; ++o, w.next()) out[w.off1()] = finish<K, A, To>(fold_runs(x + w.off0(), 0, n_runs), R);
    });
    return;
  }
  // Few long outputs: split each one across threads (within its run, or over its runs) and
  // combine the partial results.
  std::unique_ptr<A[]> partial(new A[get_num_threads()]);  // not vector<bool>: threads write
  Walker w(L.kept, L.kept_x, L.kept_out);
  w.seek(0);
  for (int64_t o = 0; o < O; ++o, w.next()) {
    const T* base = x + w.off0();
    int k;
    if (n_runs == 1) {
      k = run_chunks(run, kGrainSize, [&](int c, int64_t b, int64_t e) {
        partial[c] = fold_contiguous<K, T, A>(base + b, e - b);
      });
    } else {
      k = run_chunks(n_runs, std::max<int64_t>(1, kGrainSize / run), [&](int c, int64_t b, int64_t e) {
        partial[c] = fold_runs(base, b, e);
      });
    }
    A acc = identity<K, A>();
    for (int c = 0; c < k; ++c) acc = step<K, A>(acc, partial[c]);
    out[w.off1()] = finish<K, A, To>(acc, R);
  }
}

/// The innermost kept dim is contiguous in x: accumulate blocks of it across every reduced
/// position (the column-sum pattern), vectorised along the kept dim.
template <ReduceKind K, class T, class To>
void reduce_rows(To* out, const T* x, const Layout& L) {
  using A = acc_t<K, T>;
  // Columns per block: long contiguous row segments stream well, and the accumulators
  // (16 KiB of double) stay in L1/L2.
  constexpr int64_t kBlock = 2048;
  const int64_t M = L.kept.back();
  const int64_t out_step = L.kept_out.back();
  const Shape outer(L.kept.begin(), L.kept.end() - 1), outer_x(L.kept_x.begin(), L.kept_x.end() - 1),
      outer_out(L.kept_out.begin(), L.kept_out.end() - 1);
  const int64_t n_outer = shape_numel(outer), n_blocks = (M + kBlock - 1) / kBlock;
  const int64_t items = n_outer * n_blocks, R = L.count;
  const Shape rz(L.red.size(), 0);

  // Folds reduced positions [rb, re) of block `item` into acc[0, len).
  auto fold = [&](int64_t item, int64_t rb, int64_t re, A* acc, int64_t& len, int64_t& out_off) {
    const int64_t o = item / n_blocks, j0 = (item % n_blocks) * kBlock;
    len = std::min(kBlock, M - j0);
    Walker wo(outer, outer_x, outer_out);
    wo.seek(o);
    const T* base = x + wo.off0() + j0;
    out_off = wo.off1() + j0 * out_step;
    Walker wr(L.red, L.red_x, rz);
    wr.seek(rb);
    for (int64_t r = rb; r < re; ++r, wr.next()) {
      const T* row = base + wr.off0();
      if constexpr (std::is_same_v<T, Half> || (std::is_same_v<T, BFloat16> && is_minmax<K>)) {
        float buf[kBlock];
        widen(row, buf, len);
        step_row<K, A>(acc, buf, len);
      } else if constexpr (std::is_same_v<T, A>) {
        step_row<K, A>(acc, row, len);
      } else {
        for (int64_t j = 0; j < len; ++j) acc[j] = step<K, A>(acc[j], static_cast<A>(row[j]));
      }
    }
  };

  if (items >= 2 * get_num_threads() || R * M < kGrainSize) {
    parallel_for(0, items, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(R * kBlock, 1)),
                 [&](int64_t b, int64_t e) {
      A acc[kBlock];
      for (int64_t it = b; it < e; ++it) {
        std::fill(acc, acc + kBlock, identity<K, A>());
        int64_t len, off;
        fold(it, 0, R, acc, len, off);
        for (int64_t j = 0; j < len; ++j) out[off + j * out_step] = finish<K, A, To>(acc[j], R);
      }
    });
    return;
  }
  // Few outputs, many rows: each thread folds a share of the rows, then the shares combine.
  const int nt = get_num_threads();
  const size_t n_partial = static_cast<size_t>(nt) * items * kBlock;
  std::unique_ptr<A[]> partial(new A[n_partial]);  // not vector<bool>: threads write
  std::fill(partial.get(), partial.get() + n_partial, identity<K, A>());
  std::vector<int64_t> offs(items), lens(items);
  int k = run_chunks(R, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(M, 1)), [&](int c, int64_t b, int64_t e) {
    for (int64_t it = 0; it < items; ++it) {
      int64_t len, off;
      fold(it, b, e, partial.get() + (static_cast<size_t>(c) * items + it) * kBlock, len, off);
      if (c == 0) { lens[it] = len; offs[it] = off; }
    }
  });
  for (int64_t it = 0; it < items; ++it) {
    for (int64_t j = 0; j < lens[it]; ++j) {
      A acc = partial[it * kBlock + j];
      for (int c = 1; c < k; ++c) acc = step<K, A>(acc, partial[(static_cast<size_t>(c) * items + it) * kBlock + j]);
      out[offs[it] + j * out_step] = finish<K, A, To>(acc, R);
    }
  }
}

template <ReduceKind K, class T, class To>
void reduce_typed(Tensor& out, const Tensor& x, const IntList& dims) {
  Layout L = make_layout(out, x, dims);
  To* o = static_cast<To*>(out.data_ptr());
  if (L.count == 0) {  // an empty reduction gives the identity (mean: 0/0 = NaN)
    using A = acc_t<K, T>;
    KILN_CHECK(K != ReduceKind::max && K != ReduceKind::min,
               "{}: cannot reduce over a zero-size dimension (input shape {})", kind_name(K), x.sizes());
    const To v = K == ReduceKind::mean ? static_cast<To>(std::numeric_limits<double>::quiet_NaN())
                                       : finish<K, A, To>(identity<K, A>(), 1);
    Walker w(L.kept, L.kept_out, L.kept_out);
    w.seek(0);
    for (int64_t i = 0; i < L.outputs; ++i, w.next()) o[w.off1()] = v;
    return;
  }
  const T* p = static_cast<const T*>(x.data_ptr());
  if (L.red.empty() || L.red_x.back() == 1) {
    reduce_inner<K, T, To>(o, p, L);
  } else if (!L.kept.empty() && L.kept_x.back() == 1) {
    reduce_rows<K, T, To>(o, p, L);
  } else {
    // Copy x with its reduced dims moved last into a contiguous buffer: one contiguous run
    // per output.
    const int64_t nd = x.dim();
    std::vector<bool> reduced(nd, false);
    for (int64_t d : dims) reduced[wrap_dim(d, nd, "reduce")] = true;
    Shape ps, pst, os, ost;
    for (int pass = 0; pass < 2; ++pass)
      for (int64_t d = 0; d < nd; ++d)
        if (reduced[d] == (pass == 1)) { ps.push_back(x.sizes()[d]); pst.push_back(x.strides()[d]); }
    Tensor src = make_view(x, ps, pst, x.offset());
    Tensor tmp = make_tensor(ps, x.dtype(), x.device());
    kernels::copy[x.device()](tmp, src);
    // The output seen through the same permutation, with the reduced dims (size 1) last.
    for (int64_t d = 0; d < nd; ++d)
      if (!reduced[d]) { os.push_back(out.sizes()[d]); ost.push_back(out.strides()[d]); }
    IntList tail;
    for (int64_t d = static_cast<int64_t>(os.size()); d < nd; ++d) {
      os.push_back(1); ost.push_back(1); tail.push_back(d);
    }
    Tensor out_view = make_view(out, os, ost, out.offset());
    Layout L2 = make_layout(out_view, tmp, tail);
    reduce_inner<K, T, To>(o, static_cast<const T*>(tmp.data_ptr()), L2);
  }
}

template <ReduceKind K> void reduce_kind(Tensor& out, const Tensor& x, const IntList& dims) {
  const char* name = kind_name(K).data();
  KILN_DISPATCH_ALL(x.dtype(), name, [&]<class T>() {
    if (out.dtype() == x.dtype()) {
      reduce_typed<K, T, T>(out, x, dims);
    } else if constexpr (std::is_integral_v<T>) {
      KILN_CHECK(out.dtype() == kInt64, "{}: cannot reduce {} into {}", name, x.dtype(), out.dtype());
      reduce_typed<K, T, int64_t>(out, x, dims);
    } else {
      fail("{}: cannot reduce {} into {}", name, x.dtype(), out.dtype());
    }
  });
}

void reduce_kernel(ReduceKind kind, Tensor& out, const Tensor& x, const IntList& dims) {
  if (out.numel() == 0) return;
  switch (kind) {
    case ReduceKind::sum: return reduce_kind<ReduceKind::sum>(out, x, dims);
    case ReduceKind::mean: return reduce_kind<ReduceKind::mean>(out, x, dims);
    case ReduceKind::max: return reduce_kind<ReduceKind::max>(out, x, dims);
    case ReduceKind::min: return reduce_kind<ReduceKind::min>(out, x, dims);
    case ReduceKind::prod: return reduce_kind<ReduceKind::prod>(out, x, dims);
  }
}

// ---- argmax / argmin ----------------------------------------------------------------------

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
    std::unique_ptr<A[]> best(new A[get_num_threads()]);
    std::vector<int64_t> at(get_num_threads());
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

void arg_reduce_kernel(ReduceKind kind, Tensor& out, const Tensor& x, int64_t dim) {
  KILN_CHECK(kind == ReduceKind::max || kind == ReduceKind::min, "arg_reduce: kind must be max or min, got {}",
             kind_name(kind));
  KILN_CHECK(out.dtype() == kInt64, "arg_reduce: output must be i64, got {}", out.dtype());
  const bool is_max = kind == ReduceKind::max;
  const char* name = is_max ? "argmax" : "argmin";
  if (out.numel() == 0) return;
  KILN_DISPATCH_ALL(x.dtype(), name, [&]<class T>() {
    if (is_max) arg_reduce_typed<true, T>(out, x, dim);
    else arg_reduce_typed<false, T>(out, x, dim);
  });
}

}  // namespace

KILN_REGISTER_KERNEL(reduce, DeviceType::CPU, &reduce_kernel);
KILN_REGISTER_KERNEL(arg_reduce, DeviceType::CPU, &arg_reduce_kernel);

}  // namespace kiln::cpu
