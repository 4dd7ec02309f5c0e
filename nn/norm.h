// Normalisation layers: BatchNorm1d/2d (running statistics, eval mode) and LayerNorm.
#pragma once

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

}  // namespace kiln::nn
