// Stateless building blocks of layers and losses (torch.nn.functional). All are compositions of
// core ops, so their gradients come from the primitives' formulas. Under autocast (amp/) linear
// runs in the lower precision and the norms and losses in f32 (core/autocast_policy.h).
#pragma once

#include <optional>

#include "core/ops.h"

namespace kiln::nn::functional {

enum class Reduction { none, mean, sum };

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
/// Rows of `weight` at `indices` (any shape), giving indices.shape + [dim].
Tensor embedding(const Tensor& indices, const Tensor& weight, std::optional<int64_t> padding_idx = std::nullopt);

// ---- losses (numerically stable; `reduction` as PyTorch)
/// logits [N, C] (or [N, C, d...]), target i64 class indices [N] (or [N, d...]).
Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction = Reduction::mean,
                     double label_smoothing = 0.0, int64_t ignore_index = -100);
/// log_probs [N, C], target i64 [N].
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, Reduction reduction = Reduction::mean,
                int64_t ignore_index = -100);
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target,
                                        Reduction reduction = Reduction::mean,
                                        const Tensor& pos_weight = Tensor());

}  // namespace kiln::nn::functional
