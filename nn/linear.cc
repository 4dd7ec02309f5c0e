#include "nn/linear.h"

#include <cmath>

#include "core/grad_mode.h"
#include "nn/functional.h"
#include "nn/init.h"

namespace kiln::nn {

Linear::Linear(int64_t in, int64_t out, bool with_bias) : Module("Linear"), in_features(in), out_features(out) {
  KILN_CHECK(in > 0 && out > 0, "Linear: in_features and out_features must be positive, got {} and {}", in, out);
  weight = register_parameter("weight", empty({out, in}));
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (with_bias) {
    bias = register_parameter("bias", empty({out}));
    double bound = 1.0 / std::sqrt(static_cast<double>(in));
    init::uniform_(bias, -bound, bound);
  }
}

Tensor Linear::forward(const Tensor& x) { return functional::linear(x, weight, bias); }

std::string Linear::extra_repr() const {
  return fmt::format("in_features={}, out_features={}, bias={}", in_features, out_features, bias.defined());
}

Embedding::Embedding(int64_t num, int64_t dim, std::optional<int64_t> pad)
    : Module("Embedding"), num_embeddings(num), embedding_dim(dim),
      padding_idx(pad ? std::optional(functional::embedding_padding_row(pad, num, "Embedding")) : std::nullopt) {
  KILN_CHECK(num > 0 && dim > 0, "Embedding: sizes must be positive, got {} x {}", num, dim);
  weight = register_parameter("weight", empty({num, dim}));
  init::normal_(weight);
  if (padding_idx) {
    NoGradGuard g;
    weight.select(0, *padding_idx).zero_();
  }
}

Tensor Embedding::forward(const Tensor& indices) { return functional::embedding(indices, weight, padding_idx); }

std::string Embedding::extra_repr() const { return fmt::format("{}, {}", num_embeddings, embedding_dim); }

}  // namespace kiln::nn
