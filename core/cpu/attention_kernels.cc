// CPU flash attention (core/ops/attention.h has the contract), its time in a few large products
// rather than many tile-sized ones.
//
// Forward: one task per (batch, head, block of kBr queries). The block's scores against a whole
// chunk of up to kKeyChunk keys come from one product, then one product multiplies the
// probabilities by the chunk's values; an online softmax (running max m and sum l per row, the
// output rescaled when m grows) joins chunks when there are more keys than one chunk
// (T > kKeyChunk). It keeps the log-sum-exp per query for backward; [Tq, Tk] probabilities never
// exist.
//
// Backward: walks blocks of kBc keys; for a key block it takes every query that sees it
// (causal: those from the block's first key on) in chunks of up to kQueryChunk, recomputes the
// transposed probabilities P^T = exp(S^T - lse) [keys, queries] with one product, dP^T = V dO^T
// with another, and then dV += P^T dO and dK += dS^T Q (each a product whose inner dimension is
// the query count) and dQ += dS K.
// With at least kOnePassHeads heads (batch x heads) there is one task per head; with fewer, dK/dV
// run over (head, key block) tasks and dQ over (head, query block) tasks, recomputing the scores.
// The choice depends on the shape, never on the thread count, and no two tasks write the same
// gradient rows, so gradients are bit-identical at any thread count.
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
#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/ops/attention.h"
#include "core/cpu/gemm.h"
#include "core/cpu/scratch.h"
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
template <class T> T* scratch(Slot slot, int64_t n) { return thread_scratch<T>(static_cast<int>(slot), n); }

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
    // Eight rows at a time, so each store writes eight contiguous elements.
    for (int64_t c0 = 0; c0 < rows; c0 += 8) {
      const int64_t nb = std::min<int64_t>(8, rows - c0);
      const T* src[8];
      for (int64_t i = 0; i < nb; ++i) src[i] = x.row(b, h, c0 + i);
      for (int64_t e = 0; e < D; ++e) {
        T* dst = t + e * ld + c0;
        for (int64_t i = 0; i < nb; ++i) dst[i] = src[i][e];
      }
    }
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

template <class T>
void forward_typed(const Heads<T>& out, T* lse, const Heads<const T>& q, const Heads<const T>& k,
                   const Heads<const T>& v, const MaskReader<T>& mask, const Dims& d, const AttentionParams& p) {
  const int64_t qblocks = (d.Tq + kBr - 1) / kBr;
  const uint32_t thr = attention_dropout_threshold(p.dropout_p);
  const T ninf = -std::numeric_limits<T>::infinity();
  const T scale = static_cast<T>(p.scale);
  const int64_t ld = padded(std::min(kKeyChunk, d.Tk));  // row stride of the scores tile
  parallel_for(0, d.B * d.H * qblocks, 1, [&](int64_t lo, int64_t hi) {
    T *S = scratch<T>(Slot::kScores, kBr * ld), *O = scratch<T>(Slot::kOut, kBr * d.Dv);
    T* keep = scratch<T>(Slot::kKeep, ld);
    std::vector<T> m(kBr), l(kBr);
    HeadCopy<T> kt{Slot::kHeadA, true}, vd{Slot::kHeadB, false};
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t bh = task / qblocks, i0 = (task % qblocks) * kBr, nr = std::min(kBr, d.Tq - i0);
      const int64_t b = bh / d.H, h = bh % d.H;
      const T* Q = q.row(b, h, i0);
      std::fill_n(O, kBr * d.Dv, T(0));
      std::fill(m.begin(), m.end(), ninf);
      std::fill(l.begin(), l.end(), T(0));
      const int64_t jend = p.causal ? std::min(d.Tk, i0 + nr) : d.Tk;
      for (int64_t j0 = 0; j0 < jend; j0 += kKeyChunk) {
        const int64_t nc = std::min(kKeyChunk, jend - j0);
        const Band seen = keys_seen(p.causal, i0, j0);
        // S = Q K^T for the whole chunk in one product (causal: only the keys each row sees).
        const T* Kt = kt.get(k, bh, d.H, d.Tk, d.D) + j0;
        small_gemm<T>(nr, nc, d.D, Q, q.st, 1, Kt, kt.ld, S, ld, false, seen);
        for (int64_t r = 0; r < nr; ++r) {
          T* srow = S + r * ld;
          const int64_t vis = p.causal ? std::clamp<int64_t>(i0 + r - j0 + 1, 0, nc) : nc;
          RowMap<T> row(srow, vis);
          row *= scale;
          if (mask.mask) mask.add(srow, b, h, i0 + r, j0, 0, 1, vis);
          const T mx = vis > 0 ? std::max(m[r], row.maxCoeff()) : m[r];
          if (mx == ninf) {  // nothing to attend to yet in this row
            std::fill(srow, srow + nc, T(0));
            continue;
          }
          const T alpha = std::exp(m[r] - mx);
          row = (row - mx).exp();
          l[r] = l[r] * alpha + row.sum();
          m[r] = mx;
          if (alpha != T(1)) RowMap<T>(O + r * d.Dv, d.Dv) *= alpha;
          if (p.dropout_p > 0) {
            dropout_keep(keep, p, thr, ((bh * d.Tq) + i0 + r) * d.Tk + j0, 1, vis);
            row *= RowMap<T>(keep, vis);
          }
          std::fill(srow + vis, srow + nc, T(0));  // the keys it does not see weigh nothing in P V
        }
        // O += P V for the whole chunk in one product.
        const T* V = vd.get(v, bh, d.H, d.Tk, d.Dv);  // (sets vd.ld)
        V += j0 * vd.ld;
        small_gemm<T>(nr, d.Dv, nc, S, ld, 1, V, vd.ld, O, d.Dv, true, {}, seen);
      }
      for (int64_t r = 0; r < nr; ++r) {
        const int64_t i = i0 + r;
        RowMap<T> dst(out.row(b, h, i), d.Dv);
        if (l[r] > T(0)) {
          dst = RowMap<T>(O + r * d.Dv, d.Dv) * (T(1) / l[r]);
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
