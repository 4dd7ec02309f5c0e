// Launchers of the flash-style attention kernels (cuda/kernels/attention.cu), called by
// cuda/attention.cc; the same contract as the CPU kernel (core/ops/attention.h): q, k, v,
// out [B, H, T, D] contiguous of one floating type, math in float (double for f64), per-row
// logsumexp in the math type, the mask read through its strides, dropout from the same Philox
// stream as the CPU so both devices drop the same elements. Head dims up to kAttentionMaxDim.
#pragma once

#include <cstdint>

#include "cuda/kernels/launch.h"

namespace kiln::cuda::kern {

inline constexpr int64_t kAttentionMaxDim = 128;

struct AttentionShape {
  int64_t B, H, Tq, Tk, D, Dv;
};

/// data null: no mask. bool (true = attend) or the kernels' element type (added).
struct AttentionMask {
  const void* data = nullptr;
  bool is_bool = false;
  int64_t sb = 0, sh = 0, si = 0, sj = 0;
};

struct AttentionFlags {
  double scale;
  bool causal;
  double dropout_p;
  uint64_t seed, offset;
  uint32_t threshold;  ///< a Philox word below it drops its element
};

/// out [B, H, Tq, Dv] and lse [B, H, Tq] (math type) from q, k, v.
void launch_attention_forward(ScalarType type, const void* q, const void* k, const void* v, AttentionMask mask,
                              void* out, void* lse, AttentionShape s, AttentionFlags f, CUstream_st* stream);

/// gq, gk, gv (=) and, when non-null, gmask [B, H, Tq, Tk] (=, the additive mask's gradient) from
/// go and the forward's out and lse; `scratch` holds B * H * Tq values of the math type.
void launch_attention_backward(ScalarType type, const void* go, const void* q, const void* k, const void* v,
                               AttentionMask mask, const void* out, const void* lse, void* scratch, void* gq,
                               void* gk, void* gv, void* gmask, AttentionShape s, AttentionFlags f,
                               CUstream_st* stream);

}  // namespace kiln::cuda::kern
