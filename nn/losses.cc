// Losses beyond the fused cross-entropy (nn/functional.cc): cross-entropy with class weights
// or probability targets, binary cross-entropy on probabilities, KL divergence, smooth-L1 and
// Huber. Each follows torch.nn.functional's formula and reduction rules, composed of core ops.
#include <cmath>

#include "nn/functional.h"
#include "nn/loss_reduction.h"

namespace kiln::nn::functional {

using detail::check_target;
using detail::policy;
using detail::reduce;

Tensor cross_entropy(const Tensor& logits0, const Tensor& target0, const CrossEntropyOptions& o) {
  const bool probabilities = is_floating(target0.dtype());
  if (!o.weight.defined() && !probabilities)
    return cross_entropy(logits0, target0, o.reduction, o.label_smoothing, o.ignore_index);
  const Tensor logits = policy(AutocastOp::cross_entropy, logits0);
  KILN_CHECK(o.label_smoothing >= 0 && o.label_smoothing <= 1,
             "cross_entropy: label_smoothing must be in [0, 1], got {}", o.label_smoothing);
  KILN_CHECK(logits.dim() >= 2, "cross_entropy: logits must be [N, C, ...], got shape {}", logits.sizes());
  const int64_t c = logits.size(1);
  KILN_CHECK(!o.weight.defined() || o.weight.sizes() == Shape{c},
             "cross_entropy: weight must have one value per class ([{}]), got shape {}", c, o.weight.sizes());
  const Tensor logp = log_softmax(detail::class_rows(logits), 1);
  const Tensor w = o.weight.defined() ? policy(AutocastOp::cross_entropy, o.weight).to(logp.dtype()) : Tensor();
  Shape per_sample = logits.sizes();
  per_sample.erase(per_sample.begin() + 1);

  if (probabilities) {
    KILN_CHECK(target0.sizes() == logits.sizes(),
               "cross_entropy: probability targets must have the logits' shape {}, got {}", logits.sizes(),
               target0.sizes());
    Tensor p = detail::class_rows(policy(AutocastOp::cross_entropy, target0)).to(logp.dtype());
    if (o.label_smoothing > 0) p = p * (1.0 - o.label_smoothing) + o.label_smoothing / static_cast<double>(c);
    Tensor terms = w.defined() ? logp * p * w : logp * p;
    Tensor loss = -terms.sum({1});
    // With probability targets "mean" divides by the number of samples, weights or not.
    if (o.reduction == Reduction::none) return loss.reshape(per_sample);
    return reduce(loss, o.reduction);
  }

  KILN_CHECK(target0.sizes() == per_sample, "cross_entropy: target shape {} does not match logits shape {} (expected {})",
             target0.sizes(), logits.sizes(), per_sample);
  const Tensor target = target0.reshape({-1});
  const Tensor valid = target != Scalar(o.ignore_index);
  const Tensor safe = where(valid, target, Scalar(int64_t{0}));
  const Tensor w_t = where(valid, w.index_select(0, safe), 0.0);          // each sample's class weight
  Tensor nll = -logp.gather(1, safe.unsqueeze(1)).squeeze(1) * w_t;
  Tensor smooth = where(valid, -(logp * w).sum({1}), 0.0);                // PyTorch's weighted smoothing term
  const double eps = o.label_smoothing;
  if (o.reduction == Reduction::mean) {
    Tensor denom = w_t.sum();
    return ((1.0 - eps) * nll.sum() + (eps / static_cast<double>(c)) * smooth.sum()) / denom;
  }
  Tensor loss = (1.0 - eps) * nll + (eps / static_cast<double>(c)) * smooth;
  if (o.reduction == Reduction::none) return loss.reshape(per_sample);
  return reduce(loss, o.reduction);
}

Tensor binary_cross_entropy(const Tensor& input0, const Tensor& target0, Reduction reduction, const Tensor& weight) {
  const Tensor x = policy(AutocastOp::binary_cross_entropy, input0);
  const Tensor y = policy(AutocastOp::binary_cross_entropy, target0);
  check_target("binary_cross_entropy", x, y);
  // PyTorch clamps each log at -100 so that a probability of exactly 0 or 1 gives a finite loss.
  Tensor log_x = clamp(log(x), -100.0, std::nullopt), log_1mx = clamp(log(1.0 - x), -100.0, std::nullopt);
  Tensor loss = -(y * log_x + (1.0 - y) * log_1mx);
  if (weight.defined()) loss = loss * weight;
  return reduce(loss, reduction);
}

Tensor kl_div(const Tensor& input0, const Tensor& target0, Reduction reduction, bool log_target) {
  const Tensor input = policy(AutocastOp::kl_div, input0), target = policy(AutocastOp::kl_div, target0);
  check_target("kl_div", input, target);
  Tensor loss;
  if (log_target) {
    loss = exp(target) * (target - input);
  } else {
    // target * (log target - input), with 0 where target == 0 (xlogy's convention).
    Tensor pos = target > Scalar(0);
    loss = where(pos, target * (log(where(pos, target, 1.0)) - input), 0.0);
  }
  return reduce(loss, reduction);
}

Tensor smooth_l1_loss(const Tensor& input0, const Tensor& target0, Reduction reduction, double beta) {
  KILN_CHECK(beta >= 0, "smooth_l1_loss: beta must be non-negative, got {}", beta);
  const Tensor x = policy(AutocastOp::smooth_l1_loss, input0), y = policy(AutocastOp::smooth_l1_loss, target0);
  check_target("smooth_l1_loss", x, y);
  Tensor d = abs(x - y);
  if (beta == 0) return reduce(d, reduction);
  return reduce(where(d < Scalar(beta), d * d * (0.5 / beta), d - 0.5 * beta), reduction);
}

Tensor huber_loss(const Tensor& input0, const Tensor& target0, Reduction reduction, double delta) {
  KILN_CHECK(delta > 0, "huber_loss: delta must be positive, got {}", delta);
  const Tensor x = policy(AutocastOp::huber_loss, input0), y = policy(AutocastOp::huber_loss, target0);
  check_target("huber_loss", x, y);
  Tensor d = abs(x - y);
  return reduce(where(d < Scalar(delta), d * d * 0.5, (d - 0.5 * delta) * delta), reduction);
}

}  // namespace kiln::nn::functional
