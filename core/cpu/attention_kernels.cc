// CPU flash attention (core/ops/attention.h has the contract), its time in a few large GEMMs
// rather than many tile-sized ones.
//
// Forward: one task per (batch, head, block of kBr queries). The block's scores against a whole
// chunk of up to kKeyChunk keys come from one GEMM, then one GEMM multiplies the probabilities by
// the chunk's values; an online softmax (running max m and sum l per row, the output rescaled
// when m grows) joins chunks when there are more keys than one chunk (T > kKeyChunk). It keeps
// the log-sum-exp per query for backward; [Tq, Tk] probabilities never exist.
//
// Backward: walks blocks of kBc keys; for a key block it takes every query that sees it
// (causal: those from the block's first key on) in chunks of up to kQueryChunk, recomputes the
// transposed probabilities P^T = exp(S^T - lse) [keys, queries] with one GEMM, dP^T = V dO^T with
// another, and then dV += P^T dO and dK += dS^T Q (each a GEMM whose inner dimension is the
// query count) and dQ += dS K. Scratch per thread: two or three [kBc, kQueryChunk] tiles.
// With at least kOnePassHeads heads (batch x heads) there is one task per head; with fewer, dK/dV
// run over (head, key block) tasks and dQ over (head, query block) tasks, recomputing the scores.
// The choice depends on the shape, never on the thread count, and no two tasks write the same
// gradient rows, so gradients are bit-identical at any thread count.
// q, k, v, the output, its gradient and the gradients of q, k, v are read and written through
// their strides (the last dim's is 1: attention_4d's contract), so a model's [B, T, H, D] heads,
// sliced out of one qkv projection, reach the kernel without a copy.
// GEMMs are core/cpu/gemm.h's serial kernels; row operations are Eigen arrays (vectorised exp).
// f16/bf16 compute in f32.
#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/ops/attention.h"
#include "core/cpu/gemm.h"
#include "core/dense.h"
#include "core/generator.h"
#include "core/kernels.h"
#include "core/parallel.h"

namespace kiln::cpu {
namespace {

constexpr int64_t kBr = 64;            // forward: queries per task
constexpr int64_t kKeyChunk = 512;     // forward: keys per scores GEMM
constexpr int64_t kBc = 64;            // backward: keys per block
constexpr int64_t kQueryChunk = 1024;  // backward: queries per GEMM
constexpr int64_t kOnePassHeads = 16;  // backward: heads (B x H) from which each head is one task

template <class T> using Arr = Eigen::Array<T, Eigen::Dynamic, 1>;
/// Scratch tiles aligned to Eigen's packets: where a row starts decides which elements take the
/// scalar path of exp and sum, and so the last bits of the result. Aligned (and every row of a
/// tile starting at a multiple of 16 elements), the result does not depend on which thread (or
/// allocation) ran the tile.
template <class T> using Buffer = std::vector<T, Eigen::aligned_allocator<T>>;
template <class T> using RowMap = Eigen::Map<Arr<T>>;
template <class T> using ConstRowMap = Eigen::Map<const Arr<T>>;

/// Row stride of a scratch tile holding n columns: n rounded up to 16 elements (64 bytes).
inline int64_t padded(int64_t n) { return (n + 15) / 16 * 16; }

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

template <class T>
void forward_typed(const Heads<T>& out, T* lse, const Heads<const T>& q, const Heads<const T>& k,
                   const Heads<const T>& v, const MaskReader<T>& mask, const Dims& d, const AttentionParams& p) {
  const int64_t qblocks = (d.Tq + kBr - 1) / kBr;
  const uint32_t thr = attention_dropout_threshold(p.dropout_p);
  const T ninf = -std::numeric_limits<T>::infinity();
  const T scale = static_cast<T>(p.scale);
  const int64_t ld = padded(std::min(kKeyChunk, d.Tk));  // row stride of the scores tile
  parallel_for(0, d.B * d.H * qblocks, 1, [&](int64_t lo, int64_t hi) {
    Buffer<T> S(kBr * ld), O(kBr * d.Dv), keep(ld);
    std::vector<T> m(kBr), l(kBr);
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t bh = task / qblocks, i0 = (task % qblocks) * kBr, nr = std::min(kBr, d.Tq - i0);
      const int64_t b = bh / d.H, h = bh % d.H;
      const T* Q = q.row(b, h, i0);
      std::fill(O.begin(), O.end(), T(0));
      std::fill(m.begin(), m.end(), ninf);
      std::fill(l.begin(), l.end(), T(0));
      const int64_t jend = p.causal ? std::min(d.Tk, i0 + nr) : d.Tk;
      for (int64_t j0 = 0; j0 < jend; j0 += kKeyChunk) {
        const int64_t nc = std::min(kKeyChunk, jend - j0);
        // S = Q K^T for the whole chunk in one GEMM.
        gemm<T>(nr, nc, d.D, {Q, true, q.st}, {k.row(b, h, j0), false, k.st}, S.data(), ld, false);
        for (int64_t r = 0; r < nr; ++r) {
          RowMap<T> row(S.data() + r * ld, nc);
          row *= scale;
          if (mask.mask) mask.add(row.data(), b, h, i0 + r, j0, 0, 1, nc);
          if (p.causal)
            for (int64_t c = std::max<int64_t>(0, i0 + r + 1 - j0); c < nc; ++c) row[c] = ninf;
          const T mx = std::max(m[r], row.maxCoeff());
          if (mx == ninf) {  // nothing to attend to yet in this row
            row.setZero();
            continue;
          }
          const T alpha = std::exp(m[r] - mx);
          row = (row - mx).exp();
          l[r] = l[r] * alpha + row.sum();
          m[r] = mx;
          if (alpha != T(1)) RowMap<T>(O.data() + r * d.Dv, d.Dv) *= alpha;
          if (p.dropout_p > 0) {
            dropout_keep(keep.data(), p, thr, ((bh * d.Tq) + i0 + r) * d.Tk + j0, 1, nc);
            row *= RowMap<T>(keep.data(), nc);
          }
        }
        // O += P V for the whole chunk in one GEMM.
        gemm<T>(nr, d.Dv, nc, {S.data(), true, ld}, {v.row(b, h, j0), true, v.st}, O.data(), d.Dv, true);
      }
      for (int64_t r = 0; r < nr; ++r) {
        const int64_t i = i0 + r;
        RowMap<T> dst(out.row(b, h, i), d.Dv);
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
  Heads<T> gq, gk, gv;
  T* gmask;  // contiguous [B, H, Tq, Tk], or null
  Heads<const T> go, q, k, v;
  const T* lse;   // [B * H * Tq], +inf where the forward's was -inf (a row with no key: P = 0)
  const T* dsum;  // [B * H * Tq]: dO_i . O_i
  const MaskReader<T>* mask;
  Dims d;
  AttentionParams p;
};

/// Per-thread tiles of the backward: [kBc, kQueryChunk] each.
template <class T> struct BackwardScratch {
  Buffer<T> P, dP, Pd, keep;
  explicit BackwardScratch(bool dropout)
      : P(kBc * kQueryChunk), dP(kBc * kQueryChunk), Pd(dropout ? kBc * kQueryChunk : 0), keep(kQueryChunk) {}
};

/// Key block [j0, j0 + nc) of head bh against queries [q0, q1): recomputes P^T and dS^T in
/// chunks of queries, then accumulates dV and dK of the key block (with_kv, also writing the
/// mask's gradient) and dQ of the queries (with_q).
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
    T *P = w.P.data(), *dP = w.dP.data();
    // S^T = K Q^T and dP^T = V dO^T: [keys, queries], one GEMM each.
    const T *K = a.k.row(b, h, j0), *Q = a.q.row(b, h, i0), *GO = a.go.row(b, h, i0);
    gemm<T>(nc, nq, d.D, {K, true, a.k.st}, {Q, false, a.q.st}, P, ld, false);
    gemm<T>(nc, nq, d.Dv, {a.v.row(b, h, j0), true, a.v.st}, {GO, false, a.go.st}, dP, ld, false);
    for (int64_t c = 0; c < nc; ++c) {
      const int64_t j = j0 + c;
      RowMap<T> pr(P + c * ld, nq), dpr(dP + c * ld, nq);
      pr *= scale;
      if (a.mask->mask) a.mask->add(pr.data(), b, h, i0, j, 1, 0, nq);
      pr = (pr - ConstRowMap<T>(L + i0, nq)).exp();
      if (p.causal) {  // query i sees key j only when j <= i
        const int64_t hidden = std::clamp<int64_t>(j - i0, 0, nq);
        std::fill(pr.data(), pr.data() + hidden, T(0));
      }
      if (p.dropout_p > 0) {
        dropout_keep(w.keep.data(), p, thr, (bh * d.Tq + i0) * d.Tk + j, d.Tk, nq);
        RowMap<T> kr(w.keep.data(), nq);
        RowMap<T>(w.Pd.data() + c * ld, nq) = pr * kr;
        dpr *= kr;
      }
      dpr = pr * (dpr - ConstRowMap<T>(Dsum + i0, nq));  // dS, the gradient of the masked scores
      if (with_kv && a.gmask) {
        T* gm = a.gmask + (bh * d.Tq + i0) * d.Tk + j;
        for (int64_t r = 0; r < nq; ++r) gm[r * d.Tk] = dpr[r];
      }
      dpr *= scale;
    }
    // dV += P^T dO and dK += dS^T Q (inner dimension: the queries), dQ += dS K (dS scaled).
    if (with_kv) {
      const T* Pv = p.dropout_p > 0 ? w.Pd.data() : P;
      gemm<T>(nc, d.Dv, nq, {Pv, true, ld}, {GO, true, a.go.st}, a.gv.row(b, h, j0), a.gv.st, true);
      gemm<T>(nc, d.D, nq, {dP, true, ld}, {Q, true, a.q.st}, a.gk.row(b, h, j0), a.gk.st, true);
    }
    if (with_q)
      gemm<T>(nq, d.D, nc, {dP, false, ld}, {K, true, a.k.st}, a.gq.row(b, h, i0), a.gq.st, true);
  }
}

/// First query that sees key j0 (causal: query j0 itself).
inline int64_t first_query(int64_t j0, bool causal) { return causal ? j0 : 0; }

template <class T> void backward_typed(const BackwardArgs<T>& a) {
  const Dims& d = a.d;
  const bool dropout = a.p.dropout_p > 0;
  const int64_t BH = d.B * d.H, kt = (d.Tk + kBc - 1) / kBc;
  parallel_for(0, BH, 1, [&](int64_t lo, int64_t hi) {  // the GEMMs accumulate into zeroed gradients
    for (int64_t bh = lo; bh < hi; ++bh) {
      const int64_t b = bh / d.H, h = bh % d.H;
      for (int64_t i = 0; i < d.Tq; ++i) std::fill_n(a.gq.row(b, h, i), d.D, T(0));
      for (int64_t j = 0; j < d.Tk; ++j) std::fill_n(a.gk.row(b, h, j), d.D, T(0));
      for (int64_t j = 0; j < d.Tk; ++j) std::fill_n(a.gv.row(b, h, j), d.Dv, T(0));
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

/// An operand as the kernel reads it: itself in the compute dtype (with the strides attention_4d
/// allows), else a contiguous copy converted to it.
Tensor readable_as(const Tensor& t, DType cd) { return !t.defined() || t.dtype() == cd ? t : dense_as(t, cd); }
/// Where the kernel writes `out`: itself in the compute dtype (any strides with a unit last one),
/// else a contiguous tensor in it that write_back converts into `out`.
Tensor written_as(const Tensor& out, DType cd) {
  if (!out.defined() || out.dtype() == cd) return out;
  return make_tensor(out.sizes(), cd, out.device());
}

void attention_forward_kernel(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& mask, const AttentionParams& p) {
  const DType cd = compute_dtype(q.dtype());
  const Tensor qc = readable_as(q, cd), kc = readable_as(k, cd), vc = readable_as(v, cd), mc = mask_as(mask, cd);
  Tensor oc = written_as(out, cd), lc = writable_as(lse, cd);
  const Dims d = dims_of(q, k, v);
  auto run = [&](auto tag) {
    using T = decltype(tag);
    forward_typed(heads_of<T>(oc), lc.data_ptr<T>(), heads_of<const T>(qc), heads_of<const T>(kc),
                  heads_of<const T>(vc), MaskReader<T>(mc), d, p);
  };
  if (cd == kFloat64) run(double{});
  else run(float{});
  write_back(out, oc);
  write_back(lse, lc);
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

KILN_REGISTER_KERNEL(attention_forward, DeviceType::CPU, &attention_forward_kernel);
KILN_REGISTER_KERNEL(attention_backward, DeviceType::CPU, &attention_backward_kernel);

}  // namespace kiln::cpu
