// Flash-style attention on CUDA: no [Tq, Tk] matrix is ever stored. Keys are staged in shared
// memory 32 at a time, one key per lane.
// - forward: a block of 4 warps takes 16 query rows of one (batch, head); each warp owns 4 rows,
//   computes the 32 scores of a key tile (lane j: q_i . k_j), updates the row's running max and
//   sum (online softmax) and its output slice (lane owns dims lane, lane + 32, ...).
// - backward: D_i = dO_i . O_i per row; then dK/dV with one warp per 32 keys walking every query
//   (lane j accumulates row j of dK and dV in shared memory), and dQ laid out as the forward.
//   Probabilities are recomputed from the saved logsumexp. No atomics: deterministic.
#include <cstdint>

#include "cuda/kernels/attention.h"
#include "cuda/kernels/dtypes.cuh"

namespace kiln::cuda::kern {
namespace {

constexpr int kKeys = 32;                        // keys per tile (one per lane)
constexpr int kWarps = 4, kRowsPerWarp = 4;      // forward and dQ blocks
constexpr int kRows = kWarps * kRowsPerWarp;     // query rows per block
constexpr int kDimsPerLane = kAttentionMaxDim / 32;
constexpr unsigned kFull = 0xffffffffu;

template <class M> __device__ __forceinline__ M neg_inf() { return -static_cast<M>(INFINITY); }
__device__ __forceinline__ float ex(float x) { return expf(x); }
__device__ __forceinline__ double ex(double x) { return exp(x); }
__device__ __forceinline__ float lg(float x) { return logf(x); }
__device__ __forceinline__ double lg(double x) { return log(x); }

template <class M> __device__ __forceinline__ M warp_max(M x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = max(x, __shfl_xor_sync(kFull, x, o));
  return x;
}
template <class M> __device__ __forceinline__ M warp_sum(M x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(kFull, x, o);
  return x;
}

/// core/generator.h's Philox4x32-10, word `w` of counter `counter`.
__device__ __forceinline__ uint32_t philox_word(uint64_t seed, uint64_t counter, int w) {
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
#pragma unroll
  for (int r = 0; r < 10; ++r) {
    const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0;
    const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
    const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    c1 = static_cast<uint32_t>(p1);
    c3 = static_cast<uint32_t>(p0);
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return w == 0 ? c0 : w == 1 ? c1 : w == 2 ? c2 : c3;
}

/// The dropout factor of probability element e: 0 or 1 / (1 - p); 1 without dropout.
template <class M> __device__ __forceinline__ M keep_factor(const AttentionFlags& f, int64_t e) {
  if (f.dropout_p <= 0) return M(1);
  const uint64_t u = static_cast<uint64_t>(e);
  return philox_word(f.seed, f.offset + u / 4, static_cast<int>(u % 4)) >= f.threshold
             ? M(1) / static_cast<M>(1.0 - f.dropout_p)
             : M(0);
}

/// scale * dot + mask for (i, j), -inf where masked or causal forbids.
template <class T, class M>
__device__ __forceinline__ M masked_score(M dot, const AttentionMask& mask, const AttentionFlags& f, int64_t b,
                                          int64_t h, int64_t i, int64_t j) {
  if (f.causal && j > i) return neg_inf<M>();
  M s = dot * static_cast<M>(f.scale);
  if (mask.data) {
    const int64_t off = b * mask.sb + h * mask.sh + i * mask.si + j * mask.sj;
    if (mask.is_bool) {
      if (!static_cast<const bool*>(mask.data)[off]) s = neg_inf<M>();
    } else {
      s += to_math(static_cast<const T*>(mask.data)[off]);
    }
  }
  return s;
}

/// Stages keys [j0, j0 + kKeys) of k (rows padded to D + 1) and v (Dv + 1) in shared memory; zeros past Tk.
template <class T, class M>
__device__ void load_kv(M* ks, M* vs, const T* k, const T* v, int64_t j0, int64_t Tk, int64_t D, int64_t Dv) {
  for (int64_t x = threadIdx.x; x < kKeys * D; x += blockDim.x) {
    const int64_t r = x / D, d = x % D, j = j0 + r;
    ks[r * (D + 1) + d] = j < Tk ? to_math(k[j * D + d]) : M(0);
  }
  for (int64_t x = threadIdx.x; x < kKeys * Dv; x += blockDim.x) {
    const int64_t r = x / Dv, d = x % Dv, j = j0 + r;
    vs[r * (Dv + 1) + d] = j < Tk ? to_math(v[j * Dv + d]) : M(0);
  }
}

template <class T>
__global__ void attention_forward_kernel(const T* q, const T* k, const T* v, AttentionMask mask, T* out,
                                         opmath_t<T>* lse, AttentionShape s, AttentionFlags f) {
  using M = opmath_t<T>;
  extern __shared__ __align__(16) unsigned char smem[];
  const int64_t D = s.D, Dv = s.Dv;
  M* ks = reinterpret_cast<M*>(smem);
  M* vs = ks + kKeys * (D + 1);
  M* qs = vs + kKeys * (Dv + 1);
  const int64_t bh = blockIdx.y, b = bh / s.H, h = bh % s.H;
  const int64_t i0 = static_cast<int64_t>(blockIdx.x) * kRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  q += bh * s.Tq * D;
  k += bh * s.Tk * D;
  v += bh * s.Tk * Dv;
  for (int64_t x = threadIdx.x; x < kRows * D; x += blockDim.x) {
    const int64_t i = i0 + x / D;
    qs[x] = i < s.Tq ? to_math(q[i * D + x % D]) : M(0);
  }
  M m[kRowsPerWarp], l[kRowsPerWarp], o[kRowsPerWarp][kDimsPerLane];
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    m[rr] = neg_inf<M>();
    l[rr] = 0;
#pragma unroll
    for (int t = 0; t < kDimsPerLane; ++t) o[rr][t] = 0;
  }
  const int64_t iend = min(s.Tq, i0 + kRows);
  const int64_t jend = f.causal ? min(s.Tk, iend) : s.Tk;
  for (int64_t j0 = 0; j0 < jend; j0 += kKeys) {
    __syncthreads();
    load_kv(ks, vs, k, v, j0, s.Tk, D, Dv);
    __syncthreads();
    const int64_t j = j0 + lane;
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      const int r = warp * kRowsPerWarp + rr;
      const int64_t i = i0 + r;
      if (i >= s.Tq) continue;  // the same for the whole warp
      M sc = neg_inf<M>();
      if (j < s.Tk) {
        M dot = 0;
        for (int64_t d = 0; d < D; ++d) dot += qs[r * D + d] * ks[lane * (D + 1) + d];
        sc = masked_score<T>(dot, mask, f, b, h, i, j);
      }
      const M mx = max(m[rr], warp_max(sc));
      if (mx == neg_inf<M>()) continue;  // nothing to attend to yet (warp-uniform)
      const M alpha = ex(m[rr] - mx);
      M p = sc == neg_inf<M>() ? M(0) : ex(sc - mx);
      l[rr] = l[rr] * alpha + warp_sum(p);
      m[rr] = mx;
      if (j < s.Tk) p *= keep_factor<M>(f, (bh * s.Tq + i) * s.Tk + j);
#pragma unroll
      for (int t = 0; t < kDimsPerLane; ++t) o[rr][t] *= alpha;
      for (int jj = 0; jj < kKeys; ++jj) {
        const M pj = __shfl_sync(kFull, p, jj);
#pragma unroll
        for (int t = 0; t < kDimsPerLane; ++t) {
          const int64_t d = lane + 32 * t;
          if (d < Dv) o[rr][t] += pj * vs[jj * (Dv + 1) + d];
        }
      }
    }
  }
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int64_t i = i0 + warp * kRowsPerWarp + rr;
    if (i >= s.Tq) continue;
    const bool any = l[rr] > M(0);
#pragma unroll
    for (int t = 0; t < kDimsPerLane; ++t) {
      const int64_t d = lane + 32 * t;
      if (d < Dv) out[(bh * s.Tq + i) * Dv + d] = from_math<T>(any ? o[rr][t] / l[rr] : M(0));
    }
    if (lane == 0) lse[bh * s.Tq + i] = any ? m[rr] + lg(l[rr]) : neg_inf<M>();
  }
}

/// dsum[row] = dO_row . O_row, one warp per row.
template <class T>
__global__ void attention_dsum_kernel(const T* go, const T* out, opmath_t<T>* dsum, int64_t rows, int64_t Dv) {
  using M = opmath_t<T>;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  M acc = 0;
  for (int64_t d = lane; d < Dv; d += 32) acc += to_math(go[row * Dv + d]) * to_math(out[row * Dv + d]);
  acc = warp_sum(acc);
  if (lane == 0) dsum[row] = acc;
}

/// dS_ij = P_ij (z_ij dO_i . v_j - D_i) and the dropped probability z_ij P_ij, for lane j.
template <class T, class M>
__device__ __forceinline__ void probs_and_ds(M qk, M dov, const AttentionMask& mask, const AttentionFlags& f,
                                             const AttentionShape& s, int64_t bh, int64_t i, int64_t j, M lse_i,
                                             M dsum_i, M& pd, M& ds) {
  const M sc = masked_score<T>(qk, mask, f, bh / s.H, bh % s.H, i, j);
  const M p = sc == neg_inf<M>() || lse_i == neg_inf<M>() ? M(0) : ex(sc - lse_i);
  const M z = keep_factor<M>(f, (bh * s.Tq + i) * s.Tk + j);
  pd = p * z;
  ds = p * (z * dov - dsum_i);
}

/// One warp per 32 keys of one (batch, head): lane j accumulates dK_j and dV_j over every query.
template <class T>
__global__ void attention_dkdv_kernel(const T* go, const T* q, const T* k, const T* v, AttentionMask mask,
                                      const opmath_t<T>* lse, const opmath_t<T>* dsum, T* gk, T* gv, T* gmask,
                                      AttentionShape s, AttentionFlags f) {
  using M = opmath_t<T>;
  extern __shared__ __align__(16) unsigned char smem[];
  const int64_t D = s.D, Dv = s.Dv;
  M* ks = reinterpret_cast<M*>(smem);
  M* vs = ks + kKeys * (D + 1);
  M* dks = vs + kKeys * (Dv + 1);
  M* dvs = dks + kKeys * (D + 1);
  M* qi = dvs + kKeys * (Dv + 1);
  M* doi = qi + D;
  const int64_t bh = blockIdx.y, j0 = static_cast<int64_t>(blockIdx.x) * kKeys;
  const int lane = threadIdx.x;
  const int64_t j = j0 + lane;
  load_kv(ks, vs, k + bh * s.Tk * D, v + bh * s.Tk * Dv, j0, s.Tk, D, Dv);
  for (int64_t x = lane; x < kKeys * (D + 1); x += 32) dks[x] = 0;
  for (int64_t x = lane; x < kKeys * (Dv + 1); x += 32) dvs[x] = 0;
  __syncwarp();
  const M scale = static_cast<M>(f.scale);
  for (int64_t i = f.causal ? j0 : 0; i < s.Tq; ++i) {
    const int64_t row = bh * s.Tq + i;
    for (int64_t d = lane; d < D; d += 32) qi[d] = to_math(q[row * D + d]);
    for (int64_t d = lane; d < Dv; d += 32) doi[d] = to_math(go[row * Dv + d]);
    __syncwarp();
    if (j < s.Tk) {
      M qk = 0, dov = 0;
      for (int64_t d = 0; d < D; ++d) qk += qi[d] * ks[lane * (D + 1) + d];
      for (int64_t d = 0; d < Dv; ++d) dov += doi[d] * vs[lane * (Dv + 1) + d];
      M pd, ds;
      probs_and_ds<T>(qk, dov, mask, f, s, bh, i, j, lse[row], dsum[row], pd, ds);
      if (gmask) gmask[row * s.Tk + j] = from_math<T>(ds);
      for (int64_t d = 0; d < Dv; ++d) dvs[lane * (Dv + 1) + d] += pd * doi[d];
      for (int64_t d = 0; d < D; ++d) dks[lane * (D + 1) + d] += scale * ds * qi[d];
    }
    __syncwarp();
  }
  for (int64_t x = lane; x < kKeys * D; x += 32) {
    const int64_t r = x / D, jj = j0 + r;
    if (jj < s.Tk) gk[(bh * s.Tk + jj) * D + x % D] = from_math<T>(dks[r * (D + 1) + x % D]);
  }
  for (int64_t x = lane; x < kKeys * Dv; x += 32) {
    const int64_t r = x / Dv, jj = j0 + r;
    if (jj < s.Tk) gv[(bh * s.Tk + jj) * Dv + x % Dv] = from_math<T>(dvs[r * (Dv + 1) + x % Dv]);
  }
}

/// dQ_i = scale * sum_j dS_ij k_j, laid out as the forward (a warp per 4 rows, lanes over keys).
template <class T>
__global__ void attention_dq_kernel(const T* go, const T* q, const T* k, const T* v, AttentionMask mask,
                                    const opmath_t<T>* lse, const opmath_t<T>* dsum, T* gq, AttentionShape s,
                                    AttentionFlags f) {
  using M = opmath_t<T>;
  extern __shared__ __align__(16) unsigned char smem[];
  const int64_t D = s.D, Dv = s.Dv;
  M* ks = reinterpret_cast<M*>(smem);
  M* vs = ks + kKeys * (D + 1);
  M* qs = vs + kKeys * (Dv + 1);
  M* dos = qs + kRows * D;
  const int64_t bh = blockIdx.y;
  const int64_t i0 = static_cast<int64_t>(blockIdx.x) * kRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int64_t x = threadIdx.x; x < kRows * D; x += blockDim.x) {
    const int64_t i = i0 + x / D;
    qs[x] = i < s.Tq ? to_math(q[(bh * s.Tq + i) * D + x % D]) : M(0);
  }
  for (int64_t x = threadIdx.x; x < kRows * Dv; x += blockDim.x) {
    const int64_t i = i0 + x / Dv;
    dos[x] = i < s.Tq ? to_math(go[(bh * s.Tq + i) * Dv + x % Dv]) : M(0);
  }
  M acc[kRowsPerWarp][kDimsPerLane];
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr)
#pragma unroll
    for (int t = 0; t < kDimsPerLane; ++t) acc[rr][t] = 0;
  const int64_t iend = min(s.Tq, i0 + kRows);
  const int64_t jend = f.causal ? min(s.Tk, iend) : s.Tk;
  for (int64_t j0 = 0; j0 < jend; j0 += kKeys) {
    __syncthreads();
    load_kv(ks, vs, k + bh * s.Tk * D, v + bh * s.Tk * Dv, j0, s.Tk, D, Dv);
    __syncthreads();
    const int64_t j = j0 + lane;
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      const int r = warp * kRowsPerWarp + rr;
      const int64_t i = i0 + r;
      if (i >= s.Tq) continue;
      M ds = 0;
      if (j < s.Tk) {
        M qk = 0, dov = 0;
        for (int64_t d = 0; d < D; ++d) qk += qs[r * D + d] * ks[lane * (D + 1) + d];
        for (int64_t d = 0; d < Dv; ++d) dov += dos[r * Dv + d] * vs[lane * (Dv + 1) + d];
        M pd;
        probs_and_ds<T>(qk, dov, mask, f, s, bh, i, j, lse[bh * s.Tq + i], dsum[bh * s.Tq + i], pd, ds);
      }
      for (int jj = 0; jj < kKeys; ++jj) {
        const M dj = __shfl_sync(kFull, ds, jj);
#pragma unroll
        for (int t = 0; t < kDimsPerLane; ++t) {
          const int64_t d = lane + 32 * t;
          if (d < D) acc[rr][t] += dj * ks[jj * (D + 1) + d];
        }
      }
    }
  }
  const M scale = static_cast<M>(f.scale);
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int64_t i = i0 + warp * kRowsPerWarp + rr;
    if (i >= s.Tq) continue;
#pragma unroll
    for (int t = 0; t < kDimsPerLane; ++t) {
      const int64_t d = lane + 32 * t;
      if (d < D) gq[(bh * s.Tq + i) * D + d] = from_math<T>(scale * acc[rr][t]);
    }
  }
}

/// Launches `kernel` with `smem` bytes of dynamic shared memory (opting in above 48 KiB).
template <class K, class... A>
void launch_with_smem(K kernel, dim3 grid, dim3 block, size_t smem, cudaStream_t stream, A... args) {
  if (smem > 48 * 1024) cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  kernel<<<grid, block, smem, stream>>>(args...);
}

}  // namespace

void launch_attention_forward(ScalarType type, const void* q, const void* k, const void* v, AttentionMask mask,
                              void* out, void* lse, AttentionShape s, AttentionFlags f, CUstream_st* stream) {
  dispatch_floating(type, [&]<class T>() {
    using M = opmath_t<T>;
    const size_t smem = sizeof(M) * (kKeys * (s.D + 1) + kKeys * (s.Dv + 1) + kRows * s.D);
    const dim3 grid(static_cast<unsigned>((s.Tq + kRows - 1) / kRows), static_cast<unsigned>(s.B * s.H));
    launch_with_smem(attention_forward_kernel<T>, grid, dim3(32 * kWarps), smem, stream, static_cast<const T*>(q),
                     static_cast<const T*>(k), static_cast<const T*>(v), mask, static_cast<T*>(out),
                     static_cast<M*>(lse), s, f);
  });
}

void launch_attention_backward(ScalarType type, const void* go, const void* q, const void* k, const void* v,
                               AttentionMask mask, const void* out, const void* lse, void* scratch, void* gq,
                               void* gk, void* gv, void* gmask, AttentionShape s, AttentionFlags f,
                               CUstream_st* stream) {
  dispatch_floating(type, [&]<class T>() {
    using M = opmath_t<T>;
    const int64_t rows = s.B * s.H * s.Tq;
    attention_dsum_kernel<T><<<static_cast<unsigned>((rows + 7) / 8), 256, 0, stream>>>(
        static_cast<const T*>(go), static_cast<const T*>(out), static_cast<M*>(scratch), rows, s.Dv);
    const size_t smem_kv = sizeof(M) * (2 * kKeys * (s.D + 1) + 2 * kKeys * (s.Dv + 1) + s.D + s.Dv);
    const dim3 grid_kv(static_cast<unsigned>((s.Tk + kKeys - 1) / kKeys), static_cast<unsigned>(s.B * s.H));
    launch_with_smem(attention_dkdv_kernel<T>, grid_kv, dim3(32), smem_kv, stream, static_cast<const T*>(go),
                     static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), mask,
                     static_cast<const M*>(lse), static_cast<const M*>(scratch), static_cast<T*>(gk),
                     static_cast<T*>(gv), static_cast<T*>(gmask), s, f);
    const size_t smem_q = sizeof(M) * (kKeys * (s.D + 1) + kKeys * (s.Dv + 1) + kRows * s.D + kRows * s.Dv);
    const dim3 grid_q(static_cast<unsigned>((s.Tq + kRows - 1) / kRows), static_cast<unsigned>(s.B * s.H));
    launch_with_smem(attention_dq_kernel<T>, grid_q, dim3(32 * kWarps), smem_q, stream, static_cast<const T*>(go),
                     static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), mask,
                     static_cast<const M*>(lse), static_cast<const M*>(scratch), static_cast<T*>(gq), s, f);
  });
}

}  // namespace kiln::cuda::kern
