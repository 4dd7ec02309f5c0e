// CPU flash attention (core/ops/attention.h has the contract). The forward runs one task per
// (batch, head, block of kBr queries) on the thread pool: it walks the keys in tiles of kBc with an
// online softmax (running max m and sum l per row, the output rescaled when m grows), so the
// [Tq, Tk] probabilities never exist beyond one [kBr, kBc] tile. The backward runs one task per
// (batch, head) when there are enough heads for the threads: for each key tile it recomputes
// P = exp(S - lse) for every query tile and accumulates dV, dK for the key tile and dQ for the
// query tile. With fewer heads than threads it runs dK/dV over (head, key tile) tasks, then dQ
// over (head, query tile) tasks. No two tasks write the same gradient rows. GEMMs are core/cpu/gemm.h's serial
// kernels; row operations are Eigen arrays (vectorised exp). f16/bf16 compute in f32.
#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/ops/attention.h"
#include "core/cpu/gemm.h"
#include "core/dense.h"
#include "core/generator.h"
#include "core/kernels.h"
#include "core/parallel.h"

namespace kiln::cpu {
namespace {

constexpr int64_t kBr = 64;  // queries per tile
constexpr int64_t kBc = 64;  // keys per tile

template <class T> using Arr = Eigen::Array<T, Eigen::Dynamic, 1>;
/// Scratch tiles aligned to Eigen's packets: where a row starts decides which elements take the
/// scalar path of exp and sum, and so the last bits of the result. Aligned, the result does not
/// depend on which thread (or allocation) ran the tile.
template <class T> using Buffer = std::vector<T, Eigen::aligned_allocator<T>>;
template <class T> using RowMap = Eigen::Map<Arr<T>>;

struct Dims {
  int64_t B, H, Tq, Tk, D, Dv;
};

/// Reads a [kBr, kBc] tile of the mask (any strides) as additive values (0 or -inf for bool).
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
  /// row[c] += mask(b, h, i, j0 + c) for c < n.
  void add_row(T* row, int64_t b, int64_t h, int64_t i, int64_t j0, int64_t n) const {
    const int64_t o = b * sb + h * sh + i * si + j0 * sj;
    if (is_bool) {
      const bool* m = static_cast<const bool*>(base) + o;
      for (int64_t c = 0; c < n; ++c)
        if (!m[c * sj]) row[c] = -std::numeric_limits<T>::infinity();
    } else {
      const T* m = static_cast<const T*>(base) + o;
      if (sj == 1) RowMap<T>(row, n) += Eigen::Map<const Arr<T>>(m, n);
      else for (int64_t c = 0; c < n; ++c) row[c] += m[c * sj];
    }
  }
};

/// keep[c] = the dropout keep factor (0 or 1 / (1 - p)) of element e0 + c, c < n.
template <class T> void dropout_row(T* keep, const AttentionParams& p, uint32_t thr, int64_t e0, int64_t n) {
  const T inv = T(1) / static_cast<T>(1.0 - p.dropout_p);
  int64_t c = 0;
  while (c < n) {
    const uint64_t e = static_cast<uint64_t>(e0 + c);
    const auto w = philox4x32(p.seed, p.offset + e / 4);
    for (uint64_t k = e % 4; k < 4 && c < n; ++k, ++c) keep[c] = w[k] >= thr ? inv : T(0);
  }
}

/// S[r, c] = scale * q_r . k_c (+ mask), -inf where causal forbids; r < nr, c < nc, row stride kBc.
template <class T>
void scores(T* S, const T* Q, const T* K, const Dims& d, const AttentionParams& p, const MaskReader<T>& mask,
            int64_t b, int64_t h, int64_t i0, int64_t nr, int64_t j0, int64_t nc) {
  gemm<T>(nr, nc, d.D, {Q, true, d.D}, {K, false, d.D}, S, kBc, false);
  const T scale = static_cast<T>(p.scale);
  for (int64_t r = 0; r < nr; ++r) {
    T* row = S + r * kBc;
    RowMap<T>(row, nc) *= scale;
    if (mask.mask) mask.add_row(row, b, h, i0 + r, j0, nc);
    if (p.causal)
      for (int64_t c = std::max<int64_t>(0, i0 + r + 1 - j0); c < nc; ++c) row[c] = -std::numeric_limits<T>::infinity();
  }
}

template <class T>
void forward_typed(T* out, T* lse, const T* q, const T* k, const T* v, const MaskReader<T>& mask, const Dims& d,
                   const AttentionParams& p) {
  const int64_t qblocks = (d.Tq + kBr - 1) / kBr;
  const uint32_t thr = attention_dropout_threshold(p.dropout_p);
  const T ninf = -std::numeric_limits<T>::infinity();
  parallel_for(0, d.B * d.H * qblocks, 1, [&](int64_t lo, int64_t hi) {
    Buffer<T> S(kBr * kBc), O(kBr * d.Dv), keep(kBc);
    std::vector<T> m(kBr), l(kBr);
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t bh = task / qblocks, i0 = (task % qblocks) * kBr, nr = std::min(kBr, d.Tq - i0);
      const int64_t b = bh / d.H, h = bh % d.H;
      const T* Q = q + (bh * d.Tq + i0) * d.D;
      const T* K = k + bh * d.Tk * d.D;
      const T* V = v + bh * d.Tk * d.Dv;
      std::fill(O.begin(), O.end(), T(0));
      std::fill(m.begin(), m.end(), ninf);
      std::fill(l.begin(), l.end(), T(0));
      const int64_t jend = p.causal ? std::min(d.Tk, i0 + nr) : d.Tk;
      for (int64_t j0 = 0; j0 < jend; j0 += kBc) {
        const int64_t nc = std::min(kBc, jend - j0);
        scores(S.data(), Q, K + j0 * d.D, d, p, mask, b, h, i0, nr, j0, nc);
        for (int64_t r = 0; r < nr; ++r) {
          RowMap<T> row(S.data() + r * kBc, nc);
          RowMap<T> o(O.data() + r * d.Dv, d.Dv);
          const T mx = std::max(m[r], row.maxCoeff());
          if (mx == ninf) {  // nothing to attend to yet in this row
            row.setZero();
            continue;
          }
          const T alpha = std::exp(m[r] - mx);
          row = (row - mx).exp();
          l[r] = l[r] * alpha + row.sum();
          m[r] = mx;
          if (alpha != T(1)) o *= alpha;
          if (p.dropout_p > 0) {
            dropout_row(keep.data(), p, thr, ((bh * d.Tq) + i0 + r) * d.Tk + j0, nc);
            row *= RowMap<T>(keep.data(), nc);
          }
        }
        gemm<T>(nr, d.Dv, nc, {S.data(), true, kBc}, {V + j0 * d.Dv, true, d.Dv}, O.data(), d.Dv, true);
      }
      for (int64_t r = 0; r < nr; ++r) {
        const int64_t i = i0 + r;
        RowMap<T> dst(out + (bh * d.Tq + i) * d.Dv, d.Dv);
        if (l[r] > T(0)) {
          dst = RowMap<T>(O.data() + r * d.Dv, d.Dv) / l[r];
          lse[bh * d.Tq + i] = m[r] + std::log(l[r]);
        } else {
          dst.setZero();
          lse[bh * d.Tq + i] = ninf;
        }
      }
    }
  });
}

/// The backward's operands and options, shared by its tasks.
template <class T> struct BackwardArgs {
  T *gq, *gk, *gv, *gmask;
  const T *go, *q, *k, *v, *out, *lse;
  const T* dsum;  // [B * H * Tq]: dO_i . O_i
  const MaskReader<T>* mask;
  Dims d;
  AttentionParams p;
};

/// Per-thread tiles of the backward.
template <class T> struct BackwardScratch {
  Buffer<T> P, dP, Pd, keep;
  explicit BackwardScratch(bool dropout)
      : P(kBr * kBc), dP(kBr * kBc), Pd(dropout ? kBr * kBc : 0), keep(kBc) {}
};

/// One (query tile, key tile) pair of head bh: recomputes P = exp(S - lse) and dS = P (dP - D),
/// then accumulates dV and dK of the key tile (with_kv, also writing the mask's gradient) and dQ
/// of the query tile (with_q).
template <class T>
void backward_tile(const BackwardArgs<T>& a, BackwardScratch<T>& w, int64_t bh, int64_t i0, int64_t nr, int64_t j0,
                   int64_t nc, bool with_kv, bool with_q) {
  const Dims& d = a.d;
  const AttentionParams& p = a.p;
  const int64_t b = bh / d.H, h = bh % d.H;
  const T *Q = a.q + bh * d.Tq * d.D, *K = a.k + bh * d.Tk * d.D, *V = a.v + bh * d.Tk * d.Dv;
  const T *GO = a.go + bh * d.Tq * d.Dv, *L = a.lse + bh * d.Tq, *Dsum = a.dsum + bh * d.Tq;
  const T scale = static_cast<T>(p.scale);
  const uint32_t thr = attention_dropout_threshold(p.dropout_p);
  T *P = w.P.data(), *dP = w.dP.data();
  scores(P, Q + i0 * d.D, K + j0 * d.D, d, p, *a.mask, b, h, i0, nr, j0, nc);
  // dP = dO V^T
  gemm<T>(nr, nc, d.Dv, {GO + i0 * d.Dv, true, d.Dv}, {V + j0 * d.Dv, false, d.Dv}, dP, kBc, false);
  for (int64_t r = 0; r < nr; ++r) {
    RowMap<T> pr(P + r * kBc, nc), dpr(dP + r * kBc, nc);
    const T li = L[i0 + r];
    if (li == -std::numeric_limits<T>::infinity()) pr.setZero();
    else pr = (pr - li).exp();
    if (p.dropout_p > 0) {
      dropout_row(w.keep.data(), p, thr, ((bh * d.Tq) + i0 + r) * d.Tk + j0, nc);
      RowMap<T> kr(w.keep.data(), nc);
      RowMap<T>(w.Pd.data() + r * kBc, nc) = pr * kr;
      dpr *= kr;
    }
    dpr = pr * (dpr - Dsum[i0 + r]);  // dS, the gradient of the masked scores
    if (with_kv && a.gmask)
      std::copy(dP + r * kBc, dP + r * kBc + nc, a.gmask + ((bh * d.Tq) + i0 + r) * d.Tk + j0);
    dpr *= scale;
  }
  // dV += P^T dO, dK += dS^T Q, dQ += dS K (dS already scaled)
  if (with_kv) {
    const T* Pv = p.dropout_p > 0 ? w.Pd.data() : P;
    gemm<T>(nc, d.Dv, nr, {Pv, false, kBc}, {GO + i0 * d.Dv, true, d.Dv}, a.gv + (bh * d.Tk + j0) * d.Dv, d.Dv, true);
    gemm<T>(nc, d.D, nr, {dP, false, kBc}, {Q + i0 * d.D, true, d.D}, a.gk + (bh * d.Tk + j0) * d.D, d.D, true);
  }
  if (with_q)
    gemm<T>(nr, d.D, nc, {dP, true, kBc}, {K + j0 * d.D, true, d.D}, a.gq + (bh * d.Tq + i0) * d.D, d.D, true);
}

/// First query tile that sees key tile j0 (causal: the diagonal one).
inline int64_t first_query_tile(int64_t j0, bool causal) { return causal ? (j0 / kBr) * kBr : 0; }

template <class T> void backward_typed(const BackwardArgs<T>& a) {
  const Dims& d = a.d;
  const bool dropout = a.p.dropout_p > 0;
  std::fill(a.gq, a.gq + d.B * d.H * d.Tq * d.D, T(0));
  std::fill(a.gk, a.gk + d.B * d.H * d.Tk * d.D, T(0));
  std::fill(a.gv, a.gv + d.B * d.H * d.Tk * d.Dv, T(0));
  const int64_t BH = d.B * d.H;
  if (BH >= get_num_threads()) {
    // Enough heads for every thread: one task per head, each tile pair visited once.
    parallel_for(0, BH, 1, [&](int64_t lo, int64_t hi) {
      BackwardScratch<T> w(dropout);
      for (int64_t bh = lo; bh < hi; ++bh)
        for (int64_t j0 = 0; j0 < d.Tk; j0 += kBc)
          for (int64_t i0 = first_query_tile(j0, a.p.causal); i0 < d.Tq; i0 += kBr)
            backward_tile(a, w, bh, i0, std::min(kBr, d.Tq - i0), j0, std::min(kBc, d.Tk - j0), true, true);
    });
    return;
  }
  // Few heads: dK/dV over (head, key tile) tasks, then dQ over (head, query tile) tasks; each
  // tile pair is recomputed twice so that no two tasks write the same gradient rows.
  const int64_t kt = (d.Tk + kBc - 1) / kBc, qt = (d.Tq + kBr - 1) / kBr;
  parallel_for(0, BH * kt, 1, [&](int64_t lo, int64_t hi) {
    BackwardScratch<T> w(dropout);
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t bh = t / kt, j0 = (t % kt) * kBc;
      for (int64_t i0 = first_query_tile(j0, a.p.causal); i0 < d.Tq; i0 += kBr)
        backward_tile(a, w, bh, i0, std::min(kBr, d.Tq - i0), j0, std::min(kBc, d.Tk - j0), true, false);
    }
  });
  parallel_for(0, BH * qt, 1, [&](int64_t lo, int64_t hi) {
    BackwardScratch<T> w(dropout);
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t bh = t / qt, i0 = (t % qt) * kBr, nr = std::min(kBr, d.Tq - i0);
      const int64_t jend = a.p.causal ? std::min(d.Tk, i0 + nr) : d.Tk;
      for (int64_t j0 = 0; j0 < jend; j0 += kBc)
        backward_tile(a, w, bh, i0, nr, j0, std::min(kBc, d.Tk - j0), false, true);
    }
  });
}

DType compute_dtype(DType t) {
  KILN_CHECK(is_floating(t), "scaled_dot_product_attention: dtype {} is not supported (floating types only)", t);
  return t == kFloat64 ? kFloat64 : kFloat32;
}

Dims dims_of(const Tensor& q, const Tensor& k, const Tensor& v) {
  return {q.size(0), q.size(1), q.size(2), k.size(2), q.size(3), v.size(3)};
}

/// The mask in the compute dtype (bool masks as they are).
Tensor mask_as(const Tensor& mask, DType cd) {
  if (!mask.defined() || mask.dtype() == kBool || mask.dtype() == cd) return mask;
  return mask.to(cd);
}

void attention_forward_kernel(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& mask, const AttentionParams& p) {
  const DType cd = compute_dtype(q.dtype());
  const Tensor qc = dense_as(q, cd), kc = dense_as(k, cd), vc = dense_as(v, cd), mc = mask_as(mask, cd);
  Tensor oc = writable_as(out, cd), lc = writable_as(lse, cd);
  const Dims d = dims_of(q, k, v);
  if (cd == kFloat64)
    forward_typed(oc.data_ptr<double>(), lc.data_ptr<double>(), qc.data_ptr<double>(), kc.data_ptr<double>(),
                  vc.data_ptr<double>(), MaskReader<double>(mc), d, p);
  else
    forward_typed(oc.data_ptr<float>(), lc.data_ptr<float>(), qc.data_ptr<float>(), kc.data_ptr<float>(),
                  vc.data_ptr<float>(), MaskReader<float>(mc), d, p);
  write_back(out, oc);
  write_back(lse, lc);
}

void attention_backward_kernel(Tensor& grad_q, Tensor& grad_k, Tensor& grad_v, Tensor& grad_mask,
                               const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& mask, const Tensor& out, const Tensor& lse, const AttentionParams& p) {
  const DType cd = compute_dtype(q.dtype());
  const Tensor qc = dense_as(q, cd), kc = dense_as(k, cd), vc = dense_as(v, cd), mc = mask_as(mask, cd),
               gc = dense_as(grad_out, cd), oc = dense_as(out, cd), lc = dense_as(lse, cd);
  Tensor gqc = writable_as(grad_q, cd), gkc = writable_as(grad_k, cd), gvc = writable_as(grad_v, cd),
         gmc = writable_as(grad_mask, cd);
  const Dims d = dims_of(q, k, v);
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const MaskReader<T> mr(mc);
    // D_i = dO_i . O_i = sum_j P_ij dP_ij (dropout included), the softmax backward's row term.
    const int64_t rows = d.B * d.H * d.Tq;
    std::vector<T> dsum(rows);
    const T *go = gc.data_ptr<T>(), *o = oc.data_ptr<T>();
    parallel_for(0, rows, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(d.Dv, 1)), [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i)
        dsum[i] = (Eigen::Map<const Arr<T>>(go + i * d.Dv, d.Dv) * Eigen::Map<const Arr<T>>(o + i * d.Dv, d.Dv)).sum();
    });
    const BackwardArgs<T> args{gqc.data_ptr<T>(), gkc.data_ptr<T>(), gvc.data_ptr<T>(),
                               gmc.defined() ? gmc.data_ptr<T>() : nullptr, go, qc.data_ptr<T>(), kc.data_ptr<T>(),
                               vc.data_ptr<T>(), o, lc.data_ptr<T>(), dsum.data(), &mr, d, p};
    backward_typed(args);
  };
  if (gmc.defined() && d.Tq * d.Tk > 0) {
    // Entries no tile visits (causal is excluded with a mask, so only fully masked rows) stay 0.
    std::fill_n(static_cast<char*>(gmc.data_ptr()), gmc.numel() * gmc.element_size(), 0);
  }
  if (cd == kFloat64) run(double{});
  else run(float{});
  write_back(grad_q, gqc);
  write_back(grad_k, gkc);
  write_back(grad_v, gvc);
  write_back(grad_mask, gmc);
}

}  // namespace

KILN_REGISTER_KERNEL(attention_forward, DeviceType::CPU, &attention_forward_kernel);
KILN_REGISTER_KERNEL(attention_backward, DeviceType::CPU, &attention_backward_kernel);

}  // namespace kiln::cpu
