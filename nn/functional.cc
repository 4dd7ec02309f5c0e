#include "nn/functional.h"

#include "nn/loss_reduction.h"

#include "core/autocast.h"
#include "core/grad_mode.h"
#include "core/kernels.h"
#include "core/op_table.h"

namespace kiln::nn::functional {

using detail::check_target;
using detail::policy;
using detail::reduce;

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  return op::linear(policy(AutocastOp::linear, x), policy(AutocastOp::linear, weight), policy(AutocastOp::linear, bias));
}

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen) {
  KILN_CHECK(p >= 0 && p <= 1, "dropout: probability must be in [0, 1], got {}", p);
  if (!training || p == 0) return x;
  if (p == 1) return x * 0.0;
  Tensor mask = empty(x.sizes(), TensorOptions().dtype(x.dtype()).device(x.device()));
  mask.bernoulli_(1.0 - p, gen);
  return x * mask * (1.0 / (1.0 - p));
}

Tensor layer_norm(const Tensor& x0, const Shape& normalized_shape, const Tensor& weight0, const Tensor& bias0,
                  double eps) {
  const Tensor x = policy(AutocastOp::layer_norm, x0), weight = policy(AutocastOp::layer_norm, weight0),
               bias = policy(AutocastOp::layer_norm, bias0);
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  KILN_CHECK(k >= 1 && x.dim() >= k, "layer_norm: normalized_shape {} does not fit input shape {}",
             normalized_shape, x.sizes());
  for (int64_t i = 0; i < k; ++i)
    KILN_CHECK(x.size(x.dim() - k + i) == normalized_shape[i],
               "layer_norm: input shape {} does not end in normalized_shape {}", x.sizes(), normalized_shape);
  return op::layer_norm(x, weight, bias, k, eps);
}

Tensor batch_norm(const Tensor& x0, Tensor running_mean, Tensor running_var, const Tensor& weight0,
                  const Tensor& bias0, bool training, double momentum, double eps) {
  // The running statistics are updated in place, so they are never cast (a cast is a copy).
  const Tensor x = policy(AutocastOp::batch_norm, x0), weight = policy(AutocastOp::batch_norm, weight0),
               bias = policy(AutocastOp::batch_norm, bias0);
  KILN_CHECK(x.dim() >= 2, "batch_norm: input must be at least 2-D (N, C, ...), got shape {}", x.sizes());
  // Training: one primitive (batch statistics, running-stat update, affine, fused backward).
  if (training) return op::batch_norm(x, weight, bias, running_mean, running_var, momentum, eps);
  const int64_t c = x.size(1);
  Shape bshape(x.dim(), 1);
  bshape[1] = c;
  KILN_CHECK(running_mean.defined() && running_var.defined(),
             "batch_norm: eval mode needs running statistics (track_running_stats)");
  Tensor y = (x - running_mean.reshape(bshape)) * rsqrt(running_var.reshape(bshape) + eps);
  if (weight.defined()) y = y * weight.reshape(bshape);
  if (bias.defined()) y = y + bias.reshape(bshape);
  return y;
}

int64_t embedding_padding_row(std::optional<int64_t> padding_idx, int64_t num, const char* op) {
  if (!padding_idx) return -1;
  KILN_CHECK(*padding_idx >= -num && *padding_idx < num, "{}: padding_idx {} is out of range [-{}, {}) for {} embeddings",
             op, *padding_idx, num, num, num);
  return *padding_idx < 0 ? *padding_idx + num : *padding_idx;
}

Tensor embedding(const Tensor& indices, const Tensor& weight, std::optional<int64_t> padding_idx) {
  KILN_CHECK(weight.dim() == 2, "embedding: weight must be 2-D [num, dim], got shape {}", weight.sizes());
  // As torch.nn.functional.embedding: the padding row is looked up as stored (the module
  // initialises it to zeros) and gets no gradient.
  return kiln::embedding(weight, indices, embedding_padding_row(padding_idx, weight.size(0), "embedding"));
}

Tensor nll_loss(const Tensor& log_probs0, const Tensor& target, Reduction reduction, int64_t ignore_index) {
  const Tensor log_probs = policy(AutocastOp::nll_loss, log_probs0);
  KILN_CHECK(log_probs.dim() >= 1 && target.dtype() == kInt64,
             "nll_loss: expected log_probs [N, C] and i64 target, got shapes {} / {} and target dtype {}",
             log_probs.sizes(), target.sizes(), target.dtype());
  KILN_CHECK(log_probs.dim() - 1 == target.dim() && log_probs.size(0) == target.size(0),
             "nll_loss: log_probs shape {} does not match target shape {}", log_probs.sizes(), target.sizes());
  Tensor valid = target != Scalar(ignore_index);
  Tensor safe_target = where(valid, target, Scalar(int64_t{0}));
  Tensor picked = log_probs.gather(1, safe_target.unsqueeze(1)).squeeze(1);
  Tensor loss = where(valid, -picked, 0.0);
  if (reduction == Reduction::mean) return loss.sum() / valid.sum().to(loss.dtype());
  return reduce(loss, reduction);
}

Tensor cross_entropy(const Tensor& logits0, const Tensor& target, Reduction reduction, double label_smoothing,
                     int64_t ignore_index) {
  const Tensor logits = policy(AutocastOp::cross_entropy, logits0);
  KILN_CHECK(label_smoothing >= 0 && label_smoothing <= 1, "cross_entropy: label_smoothing must be in [0, 1], got {}",
             label_smoothing);
  KILN_CHECK(logits.dim() >= 2, "cross_entropy: logits must be [N, C, ...], got shape {}", logits.sizes());
  Shape expected = logits.sizes();
  expected.erase(expected.begin() + 1);
  KILN_CHECK(target.sizes() == expected, "cross_entropy: target shape {} does not match logits shape {} (expected {})",
             target.sizes(), logits.sizes(), expected);
  // [N, C, d1, ...] becomes [N * d1 * ..., C] rows (class dim last), the target alike.
  const Tensor rows = detail::class_rows(logits);
  const Tensor flat_target = target.reshape({-1});
  Tensor loss = op::cross_entropy(rows, flat_target, ignore_index, label_smoothing);
  if (reduction == Reduction::mean) {
    // Divided by the number of targets that count, as torch.nn.functional.cross_entropy.
    const Tensor valid = flat_target != Scalar(ignore_index);
    return loss.sum() / valid.sum().to(loss.dtype());
  }
  if (reduction == Reduction::none) return loss.reshape(target.sizes());
  return reduce(loss, reduction);
}

Tensor mse_loss(const Tensor& input0, const Tensor& target0, Reduction reduction) {
  const Tensor input = policy(AutocastOp::mse_loss, input0), target = policy(AutocastOp::mse_loss, target0);
  check_target("mse_loss", input, target);
  Tensor d = input - target;
  return reduce(d * d, reduction);
}

Tensor l1_loss(const Tensor& input0, const Tensor& target0, Reduction reduction) {
  const Tensor input = policy(AutocastOp::l1_loss, input0), target = policy(AutocastOp::l1_loss, target0);
  check_target("l1_loss", input, target);
  return reduce(abs(input - target), reduction);
}

Tensor binary_cross_entropy_with_logits(const Tensor& x0, const Tensor& y0, Reduction reduction,
                                        const Tensor& pos_weight0) {
  constexpr AutocastOp op = AutocastOp::binary_cross_entropy_with_logits;
  const Tensor x = policy(op, x0), y = policy(op, y0), pos_weight = policy(op, pos_weight0);
  check_target("binary_cross_entropy_with_logits", x, y);
  // -log sigmoid(x) = softplus(-x), without overflow; its gradient -sigmoid(-x) holds at x == 0 too
  // (-0.5, as PyTorch's; log1p(exp(-|x|)) + max(-x, 0) gave 0 there, and -1 before clamp's bounds).
  Tensor log_sig_neg = softplus(-x);
  Tensor loss;
  if (pos_weight.defined()) {
    Tensor lw = (pos_weight - 1.0) * y + 1.0;
    loss = (1.0 - y) * x + lw * log_sig_neg;
  } else {
    loss = (1.0 - y) * x + log_sig_neg;
  }
  return reduce(loss, reduction);
}

}  // namespace kiln::nn::functional
