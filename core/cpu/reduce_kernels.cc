// CPU reductions: sum/mean/max/min/prod over any set of dims. Any strides: reduced dims are
// ordered last and coalesced. When the innermost reduced dim is contiguous, each output folds its
// contiguous runs with independent (vectorised) accumulators; when the innermost kept dim is
// contiguous, whole rows are accumulated at once (column sums); anything else is first copied so
// that the reduced dims are innermost. The folds themselves are in core/cpu/reduce_fold.h.
#include <algorithm>
#include <memory>
#include <vector>

#include "core/cpu/reduce_fold.h"

namespace kiln::cpu {
namespace {

using namespace reduce_detail;

/// The kept dims (x strides and out strides) and the reduced dims (x strides) of a reduction,
/// with size-1 dims dropped and neighbours that are contiguous with each other merged.
struct Layout {
  Shape kept, kept_x, kept_out;
  Shape red, red_x;
  int64_t outputs = 1, count = 1;
  bool mean = false;  // divide each result by count (a mean folds as a sum)
};

/// An output's value from its folded accumulator. A mean is a sum's fold divided by the count in
/// the accumulator's type, so sum and mean share every instantiation below.
template <class A, class To> inline To finish(A acc, const Layout& L) {
  return L.mean ? static_cast<To>(acc / static_cast<A>(L.count)) : static_cast<To>(acc);
}

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
  // Which of the two ways runs depends on the shape only: they sum in different orders.
  if (O >= 2 * kMaxChunks || R < kGrainSize) {
    parallel_for(0, O, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(R, 1)), [&](int64_t b, int64_t e) {
      Walker w(L.kept, L.kept_x, L.kept_out);
      w.seek(b);
      for (int64_t o = b; o < e; ++o, w.next()) out[w.off1()] = finish<A, To>(fold_runs(x + w.off0(), 0, n_runs), L);
    });
    return;
  }
  // Few long outputs: split each one across threads (within its run, or over its runs) and
  // combine the partial results.
  std::unique_ptr<A[]> partial(new A[kMaxChunks]);  // not vector<bool>: threads write
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
    out[w.off1()] = finish<A, To>(acc, L);
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
    int64_t r = rb;
    if constexpr (!is_minmax<K> && !std::is_same_v<T, Half>) {
      // Four rows per pass over the accumulators: each acc[j] is loaded and stored once per four
      // rows and takes the rows in the same order as one at a time (the same bits).
      for (; r + 4 <= re; r += 4) {
        const T* r0 = base + wr.off0();
        wr.next();
        const T* r1 = base + wr.off0();
        wr.next();
        const T* r2 = base + wr.off0();
        wr.next();
        const T* r3 = base + wr.off0();
        wr.next();
        for (int64_t j = 0; j < len; ++j) {
          A a = acc[j];
          a = step<K, A>(a, static_cast<A>(r0[j]));
          a = step<K, A>(a, static_cast<A>(r1[j]));
          a = step<K, A>(a, static_cast<A>(r2[j]));
          acc[j] = step<K, A>(a, static_cast<A>(r3[j]));
        }
      }
    }
    for (; r < re; ++r, wr.next()) {
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

  if (items >= 2 * kMaxChunks || R * M < kGrainSize) {
    parallel_for(0, items, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(R * kBlock, 1)),
                 [&](int64_t b, int64_t e) {
      A acc[kBlock];
      for (int64_t it = b; it < e; ++it) {
        std::fill(acc, acc + kBlock, identity<K, A>());
        int64_t len, off;
        fold(it, 0, R, acc, len, off);
        for (int64_t j = 0; j < len; ++j) out[off + j * out_step] = finish<A, To>(acc[j], L);
      }
    });
    return;
  }
  // Few outputs, many rows: each thread folds a share of the rows, then the shares combine.
  // At least 16 rows a chunk: each chunk's partial row (double) then costs at most 1/8 of its data.
  // At most 4 chunks: more (up to kMaxChunks) made a column sum of a 4096 x 4096 f32 matrix 30 %
  // slower on 2 cores (core_bench sum_cols).
  const int64_t row_grain = std::max<int64_t>({16, kGrainSize / std::max<int64_t>(M, 1), (R + 3) / 4});
  const size_t n_partial = static_cast<size_t>(chunk_count(R, row_grain)) * items * kBlock;
  std::unique_ptr<A[]> partial(new A[n_partial]);  // not vector<bool>: threads write
  std::fill(partial.get(), partial.get() + n_partial, identity<K, A>());
  std::vector<int64_t> offs(items), lens(items);
  // Each thread takes a run of consecutive chunks (parallel_for, not run_chunks' one chunk at a
  // time), so it streams one contiguous range of rows, as when there was a chunk per thread; the
  // chunks and the order they are added in stay fixed by the shape.
  const int k = chunk_count(R, row_grain);
  parallel_for(0, k, 1, [&](int64_t cb, int64_t ce) {
    for (int64_t c = cb; c < ce; ++c) {
      const int64_t b = R * c / k, e = R * (c + 1) / k;
      for (int64_t it = 0; it < items; ++it) {
        int64_t len, off;
        fold(it, b, e, partial.get() + (static_cast<size_t>(c) * items + it) * kBlock, len, off);
        if (c == 0) { lens[it] = len; offs[it] = off; }
      }
    }
  });
  for (int64_t it = 0; it < items; ++it) {
    for (int64_t j = 0; j < lens[it]; ++j) {
      A acc = partial[it * kBlock + j];
      for (int c = 1; c < k; ++c) acc = step<K, A>(acc, partial[(static_cast<size_t>(c) * items + it) * kBlock + j]);
      out[offs[it] + j * out_step] = finish<A, To>(acc, L);
    }
  }
}

template <ReduceKind K, class T, class To>
void reduce_typed(Tensor& out, const Tensor& x, const IntList& dims, bool mean) {
  Layout L = make_layout(out, x, dims);
  L.mean = mean;
  To* o = static_cast<To*>(out.data_ptr());
  if (L.count == 0) {  // an empty reduction gives the identity (mean: 0/0 = NaN)
    using A = acc_t<K, T>;
    KILN_CHECK(K != ReduceKind::max && K != ReduceKind::min,
               "{}: cannot reduce over a zero-size dimension (input shape {})", kind_name(K), x.sizes());
    const To v = mean ? static_cast<To>(std::numeric_limits<double>::quiet_NaN()) : static_cast<To>(identity<K, A>());
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
    L2.mean = mean;
    reduce_inner<K, T, To>(o, static_cast<const T*>(tmp.data_ptr()), L2);
  }
}

/// Bool and i32 inputs reduce through i64 copies: sums and products accumulate in i64 anyway,
/// and max/min of the widened values are the same values, so the results are exactly those of
/// reducing them directly, and the vectorised folds are compiled for one integer type, not three.
template <ReduceKind K>
void reduce_integral(Tensor& out, const Tensor& x, const IntList& dims, bool mean, const char* name) {
  KILN_CHECK(out.dtype() == x.dtype() || out.dtype() == kInt64, "{}: cannot reduce {} into {}", name, x.dtype(),
             out.dtype());
  Tensor x64 = x;
  if (x.dtype() != kInt64) {
    x64 = make_tensor(x.sizes(), kInt64, x.device());
    kernels::copy[x.device()](x64, x);
  }
  if (out.dtype() == kInt64) return reduce_typed<K, int64_t, int64_t>(out, x64, dims, mean);
  Tensor out64 = make_tensor(out.sizes(), kInt64, out.device());
  reduce_typed<K, int64_t, int64_t>(out64, x64, dims, mean);
  kernels::copy[out.device()](out, out64);
}

/// `mean` divides K's results by the count (K is sum then).
template <ReduceKind K> void reduce_kind(Tensor& out, const Tensor& x, const IntList& dims, bool mean = false) {
  const char* name = mean ? "mean" : kind_name(K).data();
  if (!is_floating(x.dtype())) return reduce_integral<K>(out, x, dims, mean, name);
  KILN_DISPATCH_FLOATING(x.dtype(), name, [&]<class T>() {
    KILN_CHECK(out.dtype() == x.dtype(), "{}: cannot reduce {} into {}", name, x.dtype(), out.dtype());
    reduce_typed<K, T, T>(out, x, dims, mean);
  });
}

void reduce_kernel(ReduceKind kind, Tensor& out, const Tensor& x, const IntList& dims) {
  if (out.numel() == 0) return;
  switch (kind) {
    case ReduceKind::sum: return reduce_kind<ReduceKind::sum>(out, x, dims);
    case ReduceKind::mean: return reduce_kind<ReduceKind::sum>(out, x, dims, /*mean=*/true);
    case ReduceKind::max: return reduce_kind<ReduceKind::max>(out, x, dims);
    case ReduceKind::min: return reduce_kind<ReduceKind::min>(out, x, dims);
    case ReduceKind::prod: return reduce_kind<ReduceKind::prod>(out, x, dims);
  }
}

}  // namespace

KILN_REGISTER_KERNEL(reduce, DeviceType::CPU, &reduce_kernel);

}  // namespace kiln::cpu
