// Kiln's op-parity table (in the spirit of ggml's test-backend-ops): one row per op case, with
// its input shapes (broadcasting, size-0 and size-1 dims included), input range and the f32
// tolerance. tests/nn/op_parity_test.cc checks every row on the CPU (f64 gradients against finite
// differences, f32 against f64, non-contiguous against contiguous inputs); tests/cuda/
// cuda_op_parity_test.cc checks every row's CUDA forward and backward against the CPU's. Adding
// an op means adding a row here.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/conv.h"
#include "nn/functional.h"

namespace kiln::test {

struct OpCase {
  std::string name;
  std::vector<Shape> shapes;  // the floating inputs, in order
  std::function<Tensor(const std::vector<Tensor>&)> fn;
  double lo = -1, hi = 1;     // inputs are uniform in [lo, hi)
  double f32_tol = 1e-5;      // f32 result vs f64, relative
};

/// Integer indices/targets on the device of the case's first input (a CPU index for a CUDA input
/// is refused, as in PyTorch).
inline Tensor ints(const Tensor& like, std::vector<int64_t> v, const Shape& shape = {}) {
  return tensor(v, shape).to(like.device());
}

namespace F = nn::functional;
using In = const std::vector<Tensor>&;

inline const std::vector<OpCase>& op_cases() {
  static const std::vector<OpCase> cases = {
      // ---- existing primitives, at edges: size-0 and size-1 dims, broadcasting, large values
      {"add broadcast", {{3, 1, 4}, {5, 1}}, [](In v) { return v[0] + v[1]; }},
      {"mul size-1 dims", {{1, 4}, {3, 1}}, [](In v) { return v[0] * v[1]; }},
      {"sum over a size-0 dim", {{0, 3}}, [](In v) { return v[0].sum({0}); }},
      {"softmax of large values", {{3, 5}}, [](In v) { return softmax(v[0] * 300.0, 1); }, -1, 1, 1e-4},
      {"logsumexp of large values", {{4, 3}}, [](In v) { return logsumexp(v[0] + 500.0, {1}); }},
      {"masked_fill broadcast mask", {{3, 4}},
       [](In v) { return masked_fill(v[0], ints(v[0], {1, 0, 0, 1}, {4}) > Scalar(0), 2.0); }},
      {"index_add", {{4, 3}, {3, 3}}, [](In v) { return index_add(v[0], 0, ints(v[0], {2, 0, 2}), v[1]); }},
      {"embedding", {{5, 3}}, [](In v) { return embedding(v[0], ints(v[0], {4, 0, 4, 1}, {2, 2})); }},
      // ---- activations: rows of core/elementwise_ops.h
      {"softplus", {{3, 5}}, [](In v) { return softplus(v[0], 2.0, 3.0); }, -3, 3},
      {"leaky_relu", {{3, 5}}, [](In v) { return leaky_relu(v[0], 0.2); }, -3, 3},
      {"elu", {{3, 5}}, [](In v) { return elu(v[0], 1.5); }, -3, 3},
      {"hardtanh", {{3, 5}}, [](In v) { return hardtanh(v[0], -1.5, 2.0); }, -3, 3},
      {"hardswish", {{4, 5}}, [](In v) { return hardswish(v[0]); }, -5, 5},
      {"gelu tanh", {{3, 5}}, [](In v) { return gelu(v[0], "tanh"); }, -3, 3},
      // ---- sorting and scans
      {"sort values", {{3, 5}}, [](In v) { return std::get<0>(sort(v[0], 1)); }},
      {"sort descending dim 0", {{4, 3}}, [](In v) { return std::get<0>(sort(v[0], 0, true)); }},
      {"topk", {{3, 6}}, [](In v) { return std::get<0>(topk(v[0], 2)); }},
      {"topk smallest", {{5, 2}}, [](In v) { return std::get<0>(topk(v[0], 3, 0, false)); }},
      {"cumsum", {{3, 5}}, [](In v) { return cumsum(v[0], 1); }},
      {"cumsum dim 0", {{7, 2}}, [](In v) { return cumsum(v[0], 0); }},
      {"cumprod", {{2, 6}}, [](In v) { return cumprod(v[0], 1); }, 0.5, 1.5},
      {"cumprod through a zero", {{2, 5}},
       [](In v) { return cumprod(v[0] * ints(v[0], {1, 1, 0, 1, 1}).to(v[0].dtype()), 1); }, 0.5, 1.5},
      // ---- rearranging
      {"flip", {{3, 4}}, [](In v) { return v[0].flip({0, 1}); }},
      {"flip size-1 dim", {{1, 4}}, [](In v) { return v[0].flip({0}); }},
      {"roll", {{3, 4}}, [](In v) { return v[0].roll({1, -3}, {0, 1}); }},
      {"roll flat", {{3, 4}}, [](In v) { return v[0].roll({5}); }},
      {"repeat", {{2, 3}}, [](In v) { return v[0].repeat({2, 1, 3}); }},
      {"tile", {{2, 3}}, [](In v) { return v[0].tile({2}); }},
      {"tril", {{2, 4, 5}}, [](In v) { return v[0].tril(1); }},
      {"triu", {{4, 3}}, [](In v) { return v[0].triu(-1); }},
      {"clamp tensor bounds", {{3, 4}, {4}, {3, 1}},
       [](In v) { return clamp(v[0], v[1] - 0.5, v[2] + 0.5); }},
      {"pad constant", {{2, 3, 4}}, [](In v) { return pad(v[0], {1, 2, 0, 1}, PadMode::constant, 0.5); }},
      {"pad crop", {{2, 3, 4}}, [](In v) { return pad(v[0], {-1, 1}); }},
      {"pad reflect", {{1, 2, 4, 5}}, [](In v) { return pad(v[0], {2, 3, 1, 2}, PadMode::reflect); }},
      {"pad replicate", {{1, 2, 3, 3}}, [](In v) { return pad(v[0], {2, 0, 1, 3}, PadMode::replicate); }},
      {"pad circular", {{2, 5}}, [](In v) { return pad(v[0], {2, 3}, PadMode::circular); }},
      // ---- linear algebra
      {"addmm", {{4}, {3, 5}, {5, 4}}, [](In v) { return addmm(v[0], v[1], v[2], 0.5, 2.0); }},
      {"baddbmm", {{2, 3, 4}, {2, 3, 5}, {2, 5, 4}}, [](In v) { return baddbmm(v[0], v[1], v[2], 1.0, -1.5); }},
      {"einsum attention scores", {{2, 3, 4, 5}, {2, 3, 6, 5}}, [](In v) { return einsum("bhqd,bhkd->bhqk", v); }},
      {"einsum attention values", {{2, 3, 4, 6}, {2, 3, 6, 5}}, [](In v) { return einsum("bhqk,bhkd->bhqd", v); }},
      {"einsum bilinear", {{3, 4}, {2, 4, 5}, {3, 5}}, [](In v) { return einsum("bi,oij,bj->bo", v); }},
      {"einsum implicit", {{3, 4}, {4, 2}}, [](In v) { return einsum("ij,jk", v); }},
      {"einsum transpose and sum", {{3, 4, 2}}, [](In v) { return einsum("ijk->ki", v); }},
      {"vector_norm 2", {{3, 4}}, [](In v) { return linalg::vector_norm(v[0], 2, {1}); }},
      {"vector_norm 1", {{3, 4}}, [](In v) { return linalg::vector_norm(v[0], 1); }},
      {"vector_norm 3", {{3, 4}}, [](In v) { return linalg::vector_norm(v[0], 3, {0}, true); }},
      {"vector_norm inf", {{3, 4}}, [](In v) { return linalg::vector_norm(v[0], INFINITY, {1}); }},
      // ---- normalisation
      {"normalize", {{3, 4}}, [](In v) { return F::normalize(v[0]); }},
      {"cosine_similarity broadcast", {{3, 4}, {1, 4}}, [](In v) { return F::cosine_similarity(v[0], v[1]); }},
      {"group_norm", {{2, 4, 3, 2}, {4}, {4}}, [](In v) { return F::group_norm(v[0], 2, v[1], v[2]); }, -1, 1, 1e-4},
      {"rms_norm", {{3, 4}, {4}}, [](In v) { return F::rms_norm(v[0], {4}, v[1], 1e-6); }},
      // ---- resampling and convolutions
      {"interpolate nearest", {{1, 2, 3, 4}}, [](In v) { return F::interpolate(v[0], {5, 7}); }},
      {"interpolate nearest scale", {{1, 2, 3, 4}}, [](In v) { return F::interpolate(v[0], {}, {2.0}); }},
      {"interpolate bilinear", {{1, 2, 3, 4}},
       [](In v) { return F::interpolate(v[0], {5, 6}, {}, F::InterpolateMode::bilinear); }},
      {"interpolate bilinear align_corners", {{1, 2, 3, 4}},
       [](In v) { return F::interpolate(v[0], {5, 7}, {}, F::InterpolateMode::bilinear, true); }},
      {"max_pool2d dilated", {{1, 2, 7, 6}}, [](In v) { return max_pool2d(v[0], {3, 2}, {2, 1}, {1, 1}, {2, 3}); }},
      {"max_pool2d dilated ceil_mode", {{2, 1, 6, 6}},
       [](In v) { return max_pool2d(v[0], {2, 2}, {2, 2}, {0, 0}, {2, 2}, true); }},
      {"conv2d same (even kernel)", {{1, 2, 5, 5}, {3, 2, 2, 4}, {3}},
       [](In v) { return conv2d(v[0], v[1], v[2], {1, 1}, ConvPadding::same); }, -1, 1, 1e-4},
      {"conv2d valid", {{1, 2, 5, 5}, {3, 2, 3, 3}}, [](In v) { return conv2d(v[0], v[1], {}, {1, 1}, ConvPadding::valid); },
       -1, 1, 1e-4},
      {"conv_transpose2d", {{1, 4, 3, 3}, {4, 3, 3, 3}, {6}},
       [](In v) { return F::conv_transpose2d(v[0], v[1], v[2], {2, 2}, {1, 1}, {1, 1}, 2); }, -1, 1, 1e-4},
      {"conv_transpose2d dilated", {{2, 2, 4, 3}, {2, 3, 2, 3}},
       [](In v) { return F::conv_transpose2d(v[0], v[1], {}, {1, 2}, {0, 1}, {0, 0}, 1, {2, 1}); }, -1, 1, 1e-4},
      // ---- losses
      {"cross_entropy class weights", {{4, 5}, {5}},
       [](In v) {
         return F::cross_entropy(v[0], ints(v[0], {1, 0, 4, 2}), {.weight = v[1] + 1.5});
       }},
      {"cross_entropy weights, smoothing, ignore_index", {{4, 5, 2}, {5}},
       [](In v) {
         return F::cross_entropy(v[0], ints(v[0], {1, 0, 4, -100, 2, 3, 3, 1}, {4, 2}),
                                 {.weight = v[1] + 1.5, .label_smoothing = 0.2});
       }},
      {"cross_entropy probabilities", {{4, 5}, {4, 5}},
       [](In v) { return F::cross_entropy(v[0], softmax(v[1], 1), {.label_smoothing = 0.1}); }},
      {"binary_cross_entropy", {{3, 4}, {3, 4}},
       [](In v) { return F::binary_cross_entropy(sigmoid(v[0]), sigmoid(v[1])); }},
      {"kl_div batchmean", {{3, 4}, {3, 4}},
       [](In v) { return F::kl_div(log_softmax(v[0], 1), softmax(v[1], 1), F::Reduction::batchmean); }},
      {"kl_div log_target", {{3, 4}, {3, 4}},
       [](In v) { return F::kl_div(log_softmax(v[0], 1), log_softmax(v[1], 1), F::Reduction::sum, true); }},
      {"smooth_l1_loss", {{3, 4}, {3, 4}}, [](In v) { return F::smooth_l1_loss(v[0] * 2.0, v[1], F::Reduction::none, 0.7); }},
      {"huber_loss", {{3, 4}, {3, 4}}, [](In v) { return F::huber_loss(v[0] * 2.0, v[1], F::Reduction::mean, 0.6); }},
  };
  return cases;
}

/// Random inputs for `c` in `dtype` (seeded by the row, so every backend sees the same values).
inline std::vector<Tensor> make_inputs(const OpCase& c, DType dtype, uint64_t seed) {
  std::vector<Tensor> in;
  for (size_t i = 0; i < c.shapes.size(); ++i) {
    Generator g(seed * 31 + i);
    in.push_back((rand(c.shapes[i], kFloat64, &g) * (c.hi - c.lo) + c.lo).to(dtype).contiguous());
  }
  return in;
}

}  // namespace kiln::test
