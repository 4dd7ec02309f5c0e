// CPU flash attention, backward (core/cpu/attention_tiles.h has what it shares with the forward).
// Walks blocks of kBc keys; for a key block it takes every query that sees it (causal: those
// from the block's first key on) in chunks of up to kQueryChunk, recomputes the transposed
// probabilities P^T = exp(S^T - lse) [keys, queries] with one product, dP^T = V dO^T with
// another, and then dV += P^T dO and dK += dS^T Q (each a product whose inner dimension is the
// query count) and dQ += dS K.
// With at least kOnePassHeads heads (batch x heads) there is one task per head; with fewer, dK/dV
// run over (head, key block) tasks and dQ over (head, query block) tasks, recomputing the scores.
// The choice depends on the shape, never on the thread count, and no two tasks write the same
// gradient rows, so gradients are bit-identical at any thread count.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/cpu/attention_tiles.h"
#include "core/kernels.h"
#include "core/parallel.h"

namespace kiln::cpu {
namespace {

using namespace attention_cpu;

/// The backward's operands and options, shared by its tasks.
template <class T> struct BackwardArgs {
  Heads<T> gq, gk, gv;
  T* gmask;  // contiguous [B, H, Tq, Tk], or null
  Heads<const T> go, q, k, v;
  const T* lse;   // [B * H * Tq], +inf where the forward's was -inf (a row with no key: P = 0)
  const T* dsum;  // [B * H * Tq]: dO_i . O_i
  const MaskReader<T>* mask;
  Dims d;
  AttentionParams p;
};

/// Per-thread scratch of the backward: [kBc, kQueryChunk] tiles and the current head's
/// transposed queries and output gradients.
template <class T> struct BackwardScratch {
  T *P, *dP, *Pd, *keep;
  // Q^T and dO^T for the scores and dP; Q, K and dO as the b operands of dK, dQ and dV.
  HeadCopy<T> qt{Slot::kHeadA, true}, got{Slot::kHeadB, true}, qd{Slot::kHeadC, false}, kd{Slot::kHeadD, false},
      god{Slot::kHeadE, false};
  explicit BackwardScratch(bool dropout)
      : P(scratch<T>(Slot::kScores, kBc * padded(kQueryChunk))),
        dP(scratch<T>(Slot::kOut, kBc * padded(kQueryChunk))),
        Pd(dropout ? scratch<T>(Slot::kDropped, kBc * padded(kQueryChunk)) : nullptr),
        keep(scratch<T>(Slot::kKeep, kQueryChunk)) {}
};

/// Key block [j0, j0 + nc) of head bh against queries [q0, q1): recomputes P^T and dS^T in
/// chunks of queries, then accumulates dV and dK of the key block
/// (with_kv, also writing the mask's gradient) and dQ of the queries (with_q).
template <class T>
void backward_block(const BackwardArgs<T>& a, BackwardScratch<T>& w, int64_t bh, int64_t j0, int64_t nc, int64_t q0,
                    int64_t q1, bool with_kv, bool with_q) {
  const Dims& d = a.d;
  const AttentionParams& p = a.p;
  const int64_t b = bh / d.H, h = bh % d.H;
  const T *L = a.lse + bh * d.Tq, *Dsum = a.dsum + bh * d.Tq;
  const T scale = static_cast<T>(p.scale);
  const uint32_t thr = attention_dropout_threshold(p.dropout_p);
  for (int64_t i0 = q0; i0 < q1; i0 += kQueryChunk) {
    const int64_t nq = std::min(kQueryChunk, q1 - i0), ld = padded(nq);
    T *P = w.P, *dP = w.dP;
    const T *K = a.k.row(b, h, j0), *V = a.v.row(b, h, j0);
    const T* Qt = w.qt.get(a.q, bh, d.H, d.Tq, d.D) + i0;
    const T* GOt = w.got.get(a.go, bh, d.H, d.Tq, d.Dv) + i0;
    const Band seeing = queries_seeing(p.causal, i0, j0);
    // S^T = K Q^T and dP^T = V dO^T: [keys, queries], one product each (causal: only the
    // queries that see each key).
    small_gemm<T>(nc, nq, d.D, K, a.k.st, 1, Qt, w.qt.ld, P, ld, false, seeing);
    small_gemm<T>(nc, nq, d.Dv, V, a.v.st, 1, GOt, w.got.ld, dP, ld, false, seeing);
    for (int64_t c = 0; c < nc; ++c) {
      const int64_t j = j0 + c;
      // Queries before h0 do not see key j (causal): their P and dS are 0.
      const int64_t h0 = p.causal ? std::clamp<int64_t>(j - i0, 0, nq) : 0, n = nq - h0;
      T *prow = P + c * ld, *dprow = dP + c * ld;
      std::fill(prow, prow + h0, T(0));
      std::fill(dprow, dprow + h0, T(0));
      RowMap<T> pr(prow + h0, n), dpr(dprow + h0, n);
      pr *= scale;
      if (a.mask->mask) a.mask->add(pr.data(), b, h, i0 + h0, j, 1, 0, n);
      pr = (pr - ConstRowMap<T>(L + i0 + h0, n)).exp();
      if (p.dropout_p > 0) {
        dropout_keep(w.keep, p, thr, (bh * d.Tq + i0 + h0) * d.Tk + j, d.Tk, n);
        RowMap<T> kr(w.keep, n);
        T* pdrow = w.Pd + c * ld;
        std::fill(pdrow, pdrow + h0, T(0));
        RowMap<T>(pdrow + h0, n) = pr * kr;
        dpr *= kr;
      }
      dpr = pr * (dpr - ConstRowMap<T>(Dsum + i0 + h0, n));  // dS, the gradient of the masked scores
      if (with_kv && a.gmask) {
        T* gm = a.gmask + (bh * d.Tq + i0) * d.Tk + j;
        for (int64_t r = 0; r < nq; ++r) gm[r * d.Tk] = dprow[r];
      }
      dpr *= scale;
    }
    // dV += P^T dO and dK += dS^T Q (inner dimension: the queries), dQ += dS K (dS scaled). The
    // first contribution writes instead of adding (nothing zeroes the gradients first): dK, dV
    // of this key block get theirs from the first query chunk (no other task writes them); the
    // queries' dQ from key block 0, which every query sees and every schedule visits first.
    if (with_kv) {
      const T* Pv = p.dropout_p > 0 ? w.Pd : P;
      const bool add = i0 != q0;
      const T* GOd = w.god.get(a.go, bh, d.H, d.Tq, d.Dv);  // (each get sets its ld)
      const T* Qd = w.qd.get(a.q, bh, d.H, d.Tq, d.D);
      GOd += i0 * w.god.ld;
      Qd += i0 * w.qd.ld;
      small_gemm<T>(nc, d.Dv, nq, Pv, ld, 1, GOd, w.god.ld, a.gv.row(b, h, j0), a.gv.st, add, {}, seeing);
      small_gemm<T>(nc, d.D, nq, dP, ld, 1, Qd, w.qd.ld, a.gk.row(b, h, j0), a.gk.st, add, {}, seeing);
    }
    if (with_q) {
      const T* Kd = w.kd.get(a.k, bh, d.H, d.Tk, d.D);
      small_gemm<T>(nq, d.D, nc, dP, 1, ld, Kd + j0 * w.kd.ld, w.kd.ld, a.gq.row(b, h, i0), a.gq.st, j0 != 0, {},
                    keys_seen(p.causal, i0, j0));
    }
  }
}

/// First query that sees key j0 (causal: query j0 itself).
inline int64_t first_query(int64_t j0, bool causal) { return causal ? j0 : 0; }

template <class T> void backward_typed(const BackwardArgs<T>& a) {
  const Dims& d = a.d;
  const bool dropout = a.p.dropout_p > 0;
  const int64_t BH = d.B * d.H, kt = (d.Tk + kBc - 1) / kBc;
  // The products write (=) the gradient rows they reach first and accumulate after (backward_block),
  // so only rows no product reaches are zeroed: all of dQ when there are no keys, and dK, dV of
  // the key blocks no query sees (causal: those from Tq on; any when there are no queries).
  int64_t unseen = d.Tk;  // first key row of the first unseen block
  for (int64_t j0 = 0; j0 < d.Tk; j0 += kBc)
    if (first_query(j0, a.p.causal) >= d.Tq) {
      unseen = j0;
      break;
    }
  if (d.Tk == 0 || unseen < d.Tk)
    parallel_for(0, BH, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t bh = lo; bh < hi; ++bh) {
        const int64_t b = bh / d.H, h = bh % d.H;
        if (d.Tk == 0)
          for (int64_t i = 0; i < d.Tq; ++i) std::fill_n(a.gq.row(b, h, i), d.D, T(0));
        for (int64_t j = unseen; j < d.Tk; ++j) std::fill_n(a.gk.row(b, h, j), d.D, T(0));
        for (int64_t j = unseen; j < d.Tk; ++j) std::fill_n(a.gv.row(b, h, j), d.Dv, T(0));
      }
    });
  if (BH >= kOnePassHeads) {
    // Enough heads: one task per head, each key block visited once.
    parallel_for(0, BH, 1, [&](int64_t lo, int64_t hi) {
      BackwardScratch<T> w(dropout);
      for (int64_t bh = lo; bh < hi; ++bh)
        for (int64_t j0 = 0; j0 < d.Tk; j0 += kBc)
          backward_block(a, w, bh, j0, std::min(kBc, d.Tk - j0), first_query(j0, a.p.causal), d.Tq, true, true);
    });
    return;
  }
  // Few heads: dK/dV over (head, key block) tasks, then dQ over (head, query block) tasks; the
  // scores are recomputed in the second pass so that no two tasks write the same gradient rows.
  parallel_for(0, BH * kt, 1, [&](int64_t lo, int64_t hi) {
    BackwardScratch<T> w(dropout);
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t bh = t / kt, j0 = (t % kt) * kBc;
      backward_block(a, w, bh, j0, std::min(kBc, d.Tk - j0), first_query(j0, a.p.causal), d.Tq, true, false);
    }
  });
  const int64_t qt = (d.Tq + kBr - 1) / kBr;
  parallel_for(0, BH * qt, 1, [&](int64_t lo, int64_t hi) {
    BackwardScratch<T> w(dropout);
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t bh = t / qt, i0 = (t % qt) * kBr, i1 = std::min(d.Tq, i0 + kBr);
      const int64_t jend = a.p.causal ? std::min(d.Tk, i1) : d.Tk;
      for (int64_t j0 = 0; j0 < jend; j0 += kBc)
        backward_block(a, w, bh, j0, std::min(kBc, d.Tk - j0), std::max(i0, first_query(j0, a.p.causal)), i1,
                       false, true);
    }
  });
}

void attention_backward_kernel(Tensor& grad_q, Tensor& grad_k, Tensor& grad_v, Tensor& grad_mask,
                               const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& mask, const Tensor& out, const Tensor& lse, const AttentionParams& p) {
  const DType cd = compute_dtype(q.dtype());
  const Tensor qc = readable_as(q, cd), kc = readable_as(k, cd), vc = readable_as(v, cd), mc = mask_as(mask, cd),
               gc = readable_as(grad_out, cd), oc = readable_as(out, cd), lc = dense_as(lse, cd);
  Tensor gqc = written_as(grad_q, cd), gkc = written_as(grad_k, cd), gvc = written_as(grad_v, cd),
         gmc = writable_as(grad_mask, cd);
  const Dims d = dims_of(q, k, v);
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const MaskReader<T> mr(mc);
    const Heads<const T> go = heads_of<const T>(gc), o = heads_of<const T>(oc);
    // D_i = dO_i . O_i = sum_j P_ij dP_ij (dropout included), the softmax backward's row term.
    const int64_t rows = d.B * d.H * d.Tq;
    std::vector<T> dsum(rows);
    parallel_for(0, rows, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(d.Dv, 1)), [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        const int64_t bh = i / d.Tq, b = bh / d.H, h = bh % d.H, t = i % d.Tq;
        dsum[i] = (ConstRowMap<T>(go.row(b, h, t), d.Dv) * ConstRowMap<T>(o.row(b, h, t), d.Dv)).sum();
      }
    });
    // A row that attended to nothing (lse -inf) gets P = exp(s - inf) = 0 in every column.
    std::vector<T, Eigen::aligned_allocator<T>> lse_or_inf(lc.data_ptr<T>(), lc.data_ptr<T>() + rows);
    for (T& x : lse_or_inf)
      if (x == -std::numeric_limits<T>::infinity()) x = std::numeric_limits<T>::infinity();
    const BackwardArgs<T> args{heads_of<T>(gqc), heads_of<T>(gkc), heads_of<T>(gvc),
                               gmc.defined() ? gmc.data_ptr<T>() : nullptr, go, heads_of<const T>(qc),
                               heads_of<const T>(kc), heads_of<const T>(vc), lse_or_inf.data(), dsum.data(), &mr, d,
                               p};
    backward_typed(args);
  };
  if (gmc.defined() && d.Tq * d.Tk > 0) {
    // Entries no block writes (causal is excluded with a mask, so none but in empty shapes) stay 0.
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

KILN_REGISTER_KERNEL(attention_backward, DeviceType::CPU, &attention_backward_kernel);

}  // namespace kiln::cpu
