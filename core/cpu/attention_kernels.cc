// CPU flash attention, forward (core/cpu/attention_tiles.h has what it shares with the backward).
// One task per (batch, head, block of kBr queries). The block's scores against a whole chunk of
// up to kKeyChunk keys come from one product, then one product multiplies the probabilities by
// the chunk's values; an online softmax (running max m and sum l per row, the output rescaled
// when m grows) joins chunks when there are more keys than one chunk (T > kKeyChunk). It keeps
// the log-sum-exp per query for backward; [Tq, Tk] probabilities never exist.
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

}  // namespace

KILN_REGISTER_KERNEL(attention_forward, DeviceType::CPU, &attention_forward_kernel);

}  // namespace kiln::cpu
