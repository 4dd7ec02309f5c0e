// Stateless building blocks of layers and losses (torch.nn.functional). All are compositions of
// core ops, so their gradients come from the primitives' formulas. Under autocast (amp/) linear
// runs in the lower precision and the norms and losses in f32 (core/autocast_policy.h).
#pragma once

#include <optional>
#include <vector>

#include "core/ops.h"

namespace kiln::nn::functional {

/// batchmean (kl_div only): the sum divided by the batch size, the KL divergence's true mean.
enum class Reduction { none, mean, sum, batchmean };

// ---- activations: core's elementwise ops (core/ops.h, rows of core/elementwise_ops.h), as F::relu etc.
using kiln::elu;
using kiln::gelu;
using kiln::hardswish;
using kiln::hardtanh;
using kiln::leaky_relu;
using kiln::relu;
using kiln::sigmoid;
using kiln::silu;
using kiln::softplus;
using kiln::tanh;

/// y = x @ weight^T + bias; x [*, in], weight [out, in], bias [out] or undefined.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
/// Zeroes elements with probability p and scales the rest by 1/(1-p) while training.
Tensor dropout(const Tensor& x, double p, bool training, Generator* gen = nullptr);
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps = 1e-5);
/// Batch norm over every dim but 1 (N, C, ...). In training it uses batch statistics and updates
/// running_mean / running_var in place (unbiased variance, like PyTorch); in eval it uses them.
Tensor batch_norm(const Tensor& x, Tensor running_mean, Tensor running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum = 0.1, double eps = 1e-5);
/// padding_idx as a row of a table of `num` embeddings (PyTorch's rule: in [-num, num), a
/// negative one counting from the end); -1 for none. Throws naming `op` when out of range.
int64_t embedding_padding_row(std::optional<int64_t> padding_idx, int64_t num, const char* op);
/// Rows of `weight` at `indices` (any shape), giving indices.shape + [dim].
Tensor embedding(const Tensor& indices, const Tensor& weight, std::optional<int64_t> padding_idx = std::nullopt);

// ---- normalisation (nn/normalization.cc)
/// x / max(||x||_p over dim, eps).
Tensor normalize(const Tensor& x, double p = 2.0, int64_t dim = 1, double eps = 1e-12);
/// x1 . x2 / (max(||x1||, eps) * max(||x2||, eps)) over `dim` (inputs broadcast).
Tensor cosine_similarity(const Tensor& x1, const Tensor& x2, int64_t dim = 1, double eps = 1e-8);
/// x [N, C, ...] normalised over each group of C / num_groups channels; weight/bias [C] or undefined.
Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight = Tensor(), const Tensor& bias = Tensor(),
                  double eps = 1e-5);
/// x * rsqrt(mean(x^2 over normalized_shape) + eps) * weight; eps defaults to the dtype's epsilon.
Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                std::optional<double> eps = std::nullopt);

// ---- resampling and padding (nn/upsample.cc, core/ops/pad.cc)
enum class InterpolateMode { nearest, bilinear };
/// torch.nn.functional.interpolate on [N, C, H, W]: give `size` (h, w) or `scale_factor` (one or two).
Tensor interpolate(const Tensor& x, const IntList& size, const std::vector<double>& scale_factor = {},
                   InterpolateMode mode = InterpolateMode::nearest, bool align_corners = false);
/// torch.nn.functional.pad (see kiln::pad).
inline Tensor pad(const Tensor& x, const IntList& pads, PadMode mode = PadMode::constant, double value = 0.0) {
  return kiln::pad(x, pads, mode, value);
}
/// torch.nn.functional.conv_transpose2d: x [N, Cin, H, W], w [Cin, Cout / groups, KH, KW].
Tensor conv_transpose2d(const Tensor& x, const Tensor& w, const Tensor& bias = Tensor(), const IntList& stride = {1, 1},
                        const IntList& padding = {0, 0}, const IntList& output_padding = {0, 0}, int64_t groups = 1,
                        const IntList& dilation = {1, 1});

// ---- losses (numerically stable; `reduction` as PyTorch)
/// logits [N, C] (or [N, C, d...]), target i64 class indices [N] (or [N, d...]).
Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction = Reduction::mean,
                     double label_smoothing = 0.0, int64_t ignore_index = -100);
/// log_probs [N, C], target i64 [N].
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, Reduction reduction = Reduction::mean,
                int64_t ignore_index = -100);
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);
struct CrossEntropyOptions {
  Tensor weight;  // [C] class weights, or undefined
  Reduction reduction = Reduction::mean;
  int64_t ignore_index = -100;
  double label_smoothing = 0.0;
};
/// cross_entropy with class weights and/or probability targets (a floating target of the logits'
/// shape), torch.nn.functional.cross_entropy's rules; integer targets without weights take the
/// fused path above.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& options);
/// On probabilities in [0, 1]; each log is clamped at -100 (as PyTorch).
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean,
                            const Tensor& weight = Tensor());
/// input: log-probabilities; target: probabilities (log-probabilities if log_target). Use
/// Reduction::batchmean for the true KL divergence (mean sums over classes then averages the batch).
Tensor kl_div(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean, bool log_target = false);
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean,
                      double beta = 1.0);
Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean, double delta = 1.0);
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target,
                                        Reduction reduction = Reduction::mean,
                                        const Tensor& pos_weight = Tensor());

}  // namespace kiln::nn::functional
