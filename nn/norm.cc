#include "nn/norm.h"

#include "core/grad_mode.h"
#include "nn/functional.h"

namespace kiln::nn {

BatchNorm::BatchNorm(const char* type, int64_t n, double e, double m, bool affine, bool track)
    : Module(type), num_features(n), eps(e), momentum(m) {
  KILN_CHECK(n > 0, "{}: num_features must be positive, got {}", type, n);
  if (affine) {
    weight = register_parameter("weight", ones({n}));
    bias = register_parameter("bias", zeros({n}));
  }
  if (track) {
    running_mean = register_buffer("running_mean", zeros({n}));
    running_var = register_buffer("running_var", ones({n}));
    num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, kInt64));
  }
}

Tensor BatchNorm::forward(const Tensor& x) {
  check_input(x);
  if (is_training() && num_batches_tracked.defined()) {
    NoGradGuard g;
    num_batches_tracked.add_(1);
  }
  // Without running statistics, batch statistics are used in eval mode too (as PyTorch).
  const bool batch_stats = is_training() || !running_mean.defined();
  return functional::batch_norm(x, running_mean, running_var, weight, bias, batch_stats, momentum, eps);
}

std::string BatchNorm::extra_repr() const {
  return fmt::format("{}, eps={}, momentum={}, affine={}", num_features, eps, momentum, weight.defined());
}

void BatchNorm1d::check_input(const Tensor& x) const {
  KILN_CHECK((x.dim() == 2 || x.dim() == 3) && x.size(1) == num_features,
             "BatchNorm1d: expected input [N, {}] or [N, {}, L], got shape {}", num_features, num_features, x.sizes());
}

void BatchNorm2d::check_input(const Tensor& x) const {
  KILN_CHECK(x.dim() == 4 && x.size(1) == num_features, "BatchNorm2d: expected input [N, {}, H, W], got shape {}",
             num_features, x.sizes());
}

LayerNorm::LayerNorm(Shape shape, double e, bool affine) : Module("LayerNorm"), normalized_shape(std::move(shape)), eps(e) {
  if (affine) {
    weight = register_parameter("weight", ones(normalized_shape));
    bias = register_parameter("bias", zeros(normalized_shape));
  }
}

Tensor LayerNorm::forward(const Tensor& x) { return functional::layer_norm(x, normalized_shape, weight, bias, eps); }

std::string LayerNorm::extra_repr() const { return fmt::format("{}, eps={}", normalized_shape, eps); }

GroupNorm::GroupNorm(int64_t groups, int64_t channels, double e, bool affine)
    : Module("GroupNorm"), num_groups(groups), num_channels(channels), eps(e) {
  KILN_CHECK(groups > 0 && channels > 0 && channels % groups == 0,
             "GroupNorm: num_channels={} must be a positive multiple of num_groups={}", channels, groups);
  if (affine) {
    weight = register_parameter("weight", ones({channels}));
    bias = register_parameter("bias", zeros({channels}));
  }
}

Tensor GroupNorm::forward(const Tensor& x) {
  KILN_CHECK(x.dim() >= 2 && x.size(1) == num_channels, "GroupNorm: expected input [N, {}, ...], got shape {}",
             num_channels, x.sizes());
  return functional::group_norm(x, num_groups, weight, bias, eps);
}

std::string GroupNorm::extra_repr() const {
  return fmt::format("{}, {}, eps={}, affine={}", num_groups, num_channels, eps, weight.defined());
}

RMSNorm::RMSNorm(Shape shape, std::optional<double> e, bool affine)
    : Module("RMSNorm"), normalized_shape(std::move(shape)), eps(e) {
  if (affine) weight = register_parameter("weight", ones(normalized_shape));
}

Tensor RMSNorm::forward(const Tensor& x) { return functional::rms_norm(x, normalized_shape, weight, eps); }

std::string RMSNorm::extra_repr() const {
  return fmt::format("{}, eps={}, elementwise_affine={}", normalized_shape,
                     eps ? fmt::format("{}", *eps) : std::string("None"), weight.defined());
}

}  // namespace kiln::nn
