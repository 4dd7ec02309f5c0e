// Normalising functions composed of core ops: F::normalize, cosine_similarity, group_norm and
// rms_norm (torch.nn.functional's formulas; under autocast they compute in f32).
#include <limits>

#include "nn/functional.h"
#include "nn/loss_reduction.h"

namespace kiln::nn::functional {

using detail::policy;

Tensor normalize(const Tensor& x0, double p, int64_t dim, double eps) {
  const Tensor x = policy(AutocastOp::normalize, x0);
  Tensor n = linalg::vector_norm(x, p, {dim}, /*keepdim=*/true);
  return x / clamp(n, eps, std::nullopt);
}

Tensor cosine_similarity(const Tensor& a0, const Tensor& b0, int64_t dim, double eps) {
  const Tensor a = policy(AutocastOp::cosine_similarity, a0), b = policy(AutocastOp::cosine_similarity, b0);
  broadcast_shapes(a.sizes(), b.sizes(), "cosine_similarity");
  // x1 . x2 / (max(|x1|, eps) * max(|x2|, eps)), as torch.nn.functional.cosine_similarity.
  Tensor na = clamp(linalg::vector_norm(a, 2, {dim}), eps, std::nullopt);
  Tensor nb = clamp(linalg::vector_norm(b, 2, {dim}), eps, std::nullopt);
  return (a * b).sum({dim}) / (na * nb);
}

Tensor group_norm(const Tensor& x0, int64_t num_groups, const Tensor& weight, const Tensor& bias, double eps) {
  const Tensor x = policy(AutocastOp::group_norm, x0);
  KILN_CHECK(x.dim() >= 2, "group_norm: input must be [N, C, ...], got shape {}", x.sizes());
  const int64_t n = x.size(0), c = x.size(1);
  KILN_CHECK(num_groups > 0 && c % num_groups == 0, "group_norm: {} channels do not divide into {} groups", c,
             num_groups);
  Tensor g = x.reshape({n, num_groups, -1});
  Tensor mean = g.mean({2}, /*keepdim=*/true);
  Tensor var = g.var({2}, /*correction=*/0, /*keepdim=*/true);
  Tensor y = ((g - mean) * rsqrt(var + eps)).reshape(x.sizes());
  Shape per_channel(x.dim(), 1);
  per_channel[1] = c;
  if (weight.defined()) y = y * policy(AutocastOp::group_norm, weight).reshape(per_channel);
  if (bias.defined()) y = y + policy(AutocastOp::group_norm, bias).reshape(per_channel);
  return y;
}

Tensor rms_norm(const Tensor& x0, const Shape& normalized_shape, const Tensor& weight, std::optional<double> eps) {
  const Tensor x = policy(AutocastOp::rms_norm, x0);
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  KILN_CHECK(k <= x.dim() && Shape(x.sizes().end() - k, x.sizes().end()) == normalized_shape,
             "rms_norm: normalized_shape {} does not match the input's trailing dims (shape {})", normalized_shape,
             x.sizes());
  IntList dims;
  for (int64_t d = x.dim() - k; d < x.dim(); ++d) dims.push_back(d);
  // As torch: eps defaults to the machine epsilon of the input's dtype.
  const DType dt = x.dtype();
  const double e = eps.value_or(dt == kFloat64    ? std::numeric_limits<double>::epsilon()
                                : dt == kFloat16  ? 0x1p-10
                                : dt == kBFloat16 ? 0x1p-7
                                                  : std::numeric_limits<float>::epsilon());
  Tensor y = x * rsqrt((x * x).mean(dims, /*keepdim=*/true) + e);
  if (weight.defined()) y = y * policy(AutocastOp::rms_norm, weight);
  return y;
}

}  // namespace kiln::nn::functional
