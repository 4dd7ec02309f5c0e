// Normalisation layers: BatchNorm1d/2d (running statistics, eval mode), LayerNorm, GroupNorm, RMSNorm.
#pragma once

#include <optional>

#include "nn/module.h"

namespace kiln::nn {

class BatchNorm : public Module {
 public:
  /// `spatial_dims` is 0 for BatchNorm1d on [N, C] (or 1 on [N, C, L]) and 2 for BatchNorm2d.
  BatchNorm(const char* type, int64_t num_features, double eps, double momentum, bool affine,
            bool track_running_stats);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  Tensor weight, bias, running_mean, running_var, num_batches_tracked;
  const int64_t num_features;
  const double eps, momentum;

 protected:
  virtual void check_input(const Tensor& x) const = 0;
};

class BatchNorm1d : public BatchNorm {
 public:
  explicit BatchNorm1d(int64_t num_features, double eps = 1e-5, double momentum = 0.1, bool affine = true,
                       bool track_running_stats = true)
      : BatchNorm("BatchNorm1d", num_features, eps, momentum, affine, track_running_stats) {}

 protected:
  void check_input(const Tensor& x) const override;
};

class BatchNorm2d : public BatchNorm {
 public:
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, double momentum = 0.1, bool affine = true,
                       bool track_running_stats = true)
      : BatchNorm("BatchNorm2d", num_features, eps, momentum, affine, track_running_stats) {}

 protected:
  void check_input(const Tensor& x) const override;
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  Tensor weight, bias;
  const Shape normalized_shape;
  const double eps;
};

/// Normalises each group of num_channels / num_groups channels of [N, C, ...] (torch.nn.GroupNorm).
class GroupNorm : public Module {
 public:
  GroupNorm(int64_t num_groups, int64_t num_channels, double eps = 1e-5, bool affine = true);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  Tensor weight, bias;
  const int64_t num_groups, num_channels;
  const double eps;
};

/// Root-mean-square normalisation over the trailing `normalized_shape` (torch.nn.RMSNorm; eps
/// defaults to the input dtype's machine epsilon).
class RMSNorm : public Module {
 public:
  explicit RMSNorm(Shape normalized_shape, std::optional<double> eps = std::nullopt, bool elementwise_affine = true);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  Tensor weight;
  const Shape normalized_shape;
  const std::optional<double> eps;
};

}  // namespace kiln::nn
