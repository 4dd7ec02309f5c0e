// Linear, Embedding and Flatten layers.
#pragma once

#include <optional>

#include "nn/module.h"

namespace kiln::nn {

/// y = x W^T + b with W [out, in]; PyTorch's default init (kaiming_uniform(a=sqrt(5)) for W,
/// U(-1/sqrt(in), 1/sqrt(in)) for b).
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  Tensor weight, bias;
  const int64_t in_features, out_features;
};

/// A lookup table of `num_embeddings` vectors of size `embedding_dim`, initialised N(0, 1). The
/// row `padding_idx` (negative: counted from the end; stored normalised) starts at zeros, is
/// looked up as stored, and never receives a gradient (torch.nn.Embedding).
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, std::optional<int64_t> padding_idx = std::nullopt);
  Tensor forward(const Tensor& indices) override;
  std::string extra_repr() const override;

  Tensor weight;
  const int64_t num_embeddings, embedding_dim;
  const std::optional<int64_t> padding_idx;
};

/// Flattens dims start_dim..end_dim (default: all but the batch dim).
class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1)
      : Module("Flatten"), start_dim_(start_dim), end_dim_(end_dim) {}
  Tensor forward(const Tensor& x) override { return x.flatten(start_dim_, end_dim_); }

 private:
  int64_t start_dim_, end_dim_;
};

}  // namespace kiln::nn
