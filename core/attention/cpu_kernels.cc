// CPU flash attention (core/attention/attention.h has the contract). The forward runs one task per
// (batch, head, block of kBr queries) on the thread pool: it walks the keys in tiles of kBc with an
// online softmax (running max m and sum l per row, the output rescaled when m grows), so the
// [Tq, Tk] probabilities never exist beyond one [kBr, kBc] tile. The backward runs one task per
// (batch, head): for each key tile it recomputes P = exp(S - lse) for every query tile and
// accumulates dV, dK for the key tile and dQ for the query tile, so no two tasks write the same
// gradient and the result does not depend on the thread count. GEMMs are core/cpu/gemm.h's serial
// kernels; row operations are Eigen arrays (vectorised exp). f16/bf16 compute in f32.
#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/attention/attention.h"
#include "core/cpu/gemm.h"
#include "core/dense.h"
#include "core/generator.h"
#include "core/parallel.h"

namespace kiln::cpu {
namespace {

constexpr int64_t kBr = 64;  // queries per tile
constexpr int64_t kBc = 64;  // keys per tile

template <class T> using Arr = Eigen::Array<T, Eigen::Dynamic, 1>;
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
    std::vector<T> S(kBr * kBc), O(kBr * d.Dv), m(kBr), l(kBr), keep(kBc);
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

template <class T>
void backward_typed(T* gq, T* gk, T* gv, T* gmask, const T* go, const T* q, const T* k, const T* v,
                    const MaskReader<T>& mask, const T* out, const T* lse, const Dims& d, const AttentionParams& p) {
  const uint32_t thr = attention_dropout_threshold(p.dropout_p);
  const T scale = static_cast<T>(p.scale);
  parallel_for(0, d.B * d.H, 1, [&](int64_t lo, int64_t hi) {
    std::vector<T> P(kBr * kBc), dP(kBr * kBc), Pd(p.dropout_p > 0 ? kBr * kBc : 0), Dsum(d.Tq), keep(kBc);
    for (int64_t bh = lo; bh < hi; ++bh) {
      const int64_t b = bh / d.H, h = bh % d.H;
      const T *Q = q + bh * d.Tq * d.D, *K = k + bh * d.Tk * d.D, *V = v + bh * d.Tk * d.Dv;
      const T *GO = go + bh * d.Tq * d.Dv, *L = lse + bh * d.Tq;
      T *GQ = gq + bh * d.Tq * d.D, *GK = gk + bh * d.Tk * d.D, *GV = gv + bh * d.Tk * d.Dv;
      // D_i = dO_i . O_i = sum_j P_ij dP_ij (dropout included), the softmax backward's row term.
      for (int64_t i = 0; i < d.Tq; ++i)
        Dsum[i] = (RowMap<T>(const_cast<T*>(GO) + i * d.Dv, d.Dv) *
                   RowMap<T>(const_cast<T*>(out) + (bh * d.Tq + i) * d.Dv, d.Dv)).sum();
      std::fill(GQ, GQ + d.Tq * d.D, T(0));
      std::fill(GK, GK + d.Tk * d.D, T(0));
      std::fill(GV, GV + d.Tk * d.Dv, T(0));
      for (int64_t j0 = 0; j0 < d.Tk; j0 += kBc) {
        const int64_t nc = std::min(kBc, d.Tk - j0);
        const int64_t istart = p.causal ? (j0 / kBr) * kBr : 0;
        for (int64_t i0 = istart; i0 < d.Tq; i0 += kBr) {
          const int64_t nr = std::min(kBr, d.Tq - i0);
          scores(P.data(), Q + i0 * d.D, K + j0 * d.D, d, p, mask, b, h, i0, nr, j0, nc);
          // dP = dO V^T
          gemm<T>(nr, nc, d.Dv, {GO + i0 * d.Dv, true, d.Dv}, {V + j0 * d.Dv, false, d.Dv}, dP.data(), kBc, false);
          for (int64_t r = 0; r < nr; ++r) {
            RowMap<T> pr(P.data() + r * kBc, nc), dpr(dP.data() + r * kBc, nc);
            const T li = L[i0 + r];
            if (li == -std::numeric_limits<T>::infinity()) pr.setZero();
            else pr = (pr - li).exp();
            if (p.dropout_p > 0) {
              dropout_row(keep.data(), p, thr, ((bh * d.Tq) + i0 + r) * d.Tk + j0, nc);
              RowMap<T> kr(keep.data(), nc);
              RowMap<T>(Pd.data() + r * kBc, nc) = pr * kr;
              dpr *= kr;
            }
            dpr = pr * (dpr - Dsum[i0 + r]);  // dS, the gradient of the masked scores
            if (gmask) std::copy(dP.data() + r * kBc, dP.data() + r * kBc + nc, gmask + ((bh * d.Tq) + i0 + r) * d.Tk + j0);
            dpr *= scale;
          }
          const T* Pv = p.dropout_p > 0 ? Pd.data() : P.data();
          // dV += P^T dO, dQ += dS K, dK += dS^T Q (dS already scaled)
          gemm<T>(nc, d.Dv, nr, {Pv, false, kBc}, {GO + i0 * d.Dv, true, d.Dv}, GV + j0 * d.Dv, d.Dv, true);
          gemm<T>(nr, d.D, nc, {dP.data(), true, kBc}, {K + j0 * d.D, true, d.D}, GQ + i0 * d.D, d.D, true);
          gemm<T>(nc, d.D, nr, {dP.data(), false, kBc}, {Q + i0 * d.D, true, d.D}, GK + j0 * d.D, d.D, true);
        }
      }
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
    backward_typed(gqc.data_ptr<T>(), gkc.data_ptr<T>(), gvc.data_ptr<T>(), gmc.defined() ? gmc.data_ptr<T>() : nullptr,
                   gc.data_ptr<T>(), qc.data_ptr<T>(), kc.data_ptr<T>(), vc.data_ptr<T>(), MaskReader<T>(mc),
                   oc.data_ptr<T>(), lc.data_ptr<T>(), d, p);
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
