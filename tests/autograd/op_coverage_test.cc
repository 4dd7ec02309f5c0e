// Every differentiable op carries a gradient: each primitive of the op table has a derivative,
// and each public op of core/ops.h whose PyTorch counterpart is differentiable records one when
// its input requires grad. Ops with integer/boolean results are listed as non-differentiable,
// explicitly. A new op gets a row here (a missing derivative is the bug this catches).
#include <doctest/doctest.h>

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "core/op_table.h"

using namespace kiln;

TEST_CASE("every primitive in the op table has a derivative") {
  std::vector<std::pair<std::string, bool>> primitives;
#define KILN_LIST_PRIMITIVE_(NAME, SIG) primitives.emplace_back(#NAME, op::NAME.has_autograd());
  KILN_OP_LIST(KILN_LIST_PRIMITIVE_)
#undef KILN_LIST_PRIMITIVE_
  REQUIRE(primitives.size() > 20);
  for (const auto& [name, differentiable] : primitives) CHECK_MESSAGE(differentiable, "op::" << name << " has no derivative");
}

namespace {

struct PublicOp {
  const char* name;
  std::function<Tensor(const Tensor& x)> call;  // x: f64 [3, 4], positive, requires grad
};

Tensor idx(std::vector<int64_t> v) { return tensor(v); }
/// A 4x4 f64 identity (the right operand of a [3, 4] x [4, 4] product).
Tensor eye_like4(const Tensor&) { return (arange(4).unsqueeze(1) == arange(4).unsqueeze(0)).to(kFloat64); }

const std::vector<PublicOp>& differentiable_ops() {
  static const std::vector<PublicOp> ops = {
      {"neg", [](const Tensor& x) { return neg(x); }},
      {"abs", [](const Tensor& x) { return abs(x); }},
      {"exp", [](const Tensor& x) { return exp(x); }},
      {"log", [](const Tensor& x) { return log(x); }},
      {"log1p", [](const Tensor& x) { return log1p(x); }},
      {"expm1", [](const Tensor& x) { return expm1(x); }},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }},
      {"sin", [](const Tensor& x) { return sin(x); }},
      {"cos", [](const Tensor& x) { return cos(x); }},
      {"tanh", [](const Tensor& x) { return tanh(x); }},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }},
      {"relu", [](const Tensor& x) { return relu(x); }},
      {"gelu", [](const Tensor& x) { return gelu(x); }},
      {"silu", [](const Tensor& x) { return silu(x); }},
      {"square", [](const Tensor& x) { return square(x); }},
      {"reciprocal", [](const Tensor& x) { return reciprocal(x); }},
      {"sign", [](const Tensor& x) { return sign(x); }},
      {"pow scalar", [](const Tensor& x) { return pow(x, 3); }},
      {"pow tensor", [](const Tensor& x) { return pow(x, x); }},
      {"pow scalar base", [](const Tensor& x) { return pow(2.0, x); }},
      {"clamp", [](const Tensor& x) { return clamp(x, 0.2, 0.8); }},
      {"add", [](const Tensor& x) { return add(x, x, 2); }},
      {"sub", [](const Tensor& x) { return sub(x, ones({4}, kFloat64)); }},
      {"mul", [](const Tensor& x) { return mul(x, x); }},
      {"div", [](const Tensor& x) { return div(ones({4}, kFloat64), x); }},
      {"maximum", [](const Tensor& x) { return maximum(x, full({4}, 0.5, kFloat64)); }},
      {"minimum", [](const Tensor& x) { return minimum(x, full({4}, 0.5, kFloat64)); }},
      {"where", [](const Tensor& x) { return where(x > 0.5, x, 0.0); }},
      {"masked_fill", [](const Tensor& x) { return masked_fill(x, x > 0.5, 1.0); }},
      {"sum", [](const Tensor& x) { return sum(x, {1}); }},
      {"mean", [](const Tensor& x) { return mean(x); }},
      {"prod", [](const Tensor& x) { return prod(x, {0}); }},
      {"amax", [](const Tensor& x) { return amax(x, {1}); }},
      {"amin", [](const Tensor& x) { return amin(x, {1}); }},
      {"max(dim)", [](const Tensor& x) { return std::get<0>(max(x, 1)); }},
      {"min(dim)", [](const Tensor& x) { return std::get<0>(min(x, 1)); }},
      {"var", [](const Tensor& x) { return var(x, {1}); }},
      {"std", [](const Tensor& x) { return kiln::std(x, {1}); }},
      {"logsumexp", [](const Tensor& x) { return logsumexp(x, {1}); }},
      {"softmax", [](const Tensor& x) { return softmax(x, 1); }},
      {"log_softmax", [](const Tensor& x) { return log_softmax(x, 1); }},
      {"matmul", [](const Tensor& x) { return matmul(x, x.t()); }},
      {"mm", [](const Tensor& x) { return mm(x, x.t()); }},
      {"bmm", [](const Tensor& x) { return bmm(x.unsqueeze(0), x.t().unsqueeze(0)); }},
      {"view", [](const Tensor& x) { return view(x, {12}); }},
      {"reshape", [](const Tensor& x) { return reshape(x.t(), {12}); }},
      {"transpose", [](const Tensor& x) { return transpose(x, 0, 1); }},
      {"permute", [](const Tensor& x) { return permute(x, {1, 0}); }},
      {"narrow", [](const Tensor& x) { return narrow(x, 1, 1, 2); }},
      {"slice", [](const Tensor& x) { return slice(x, 1, 0, 4, 2); }},
      {"select", [](const Tensor& x) { return select(x, 0, 1); }},
      {"expand", [](const Tensor& x) { return expand(x.unsqueeze(0), {2, 3, 4}); }},
      {"squeeze", [](const Tensor& x) { return squeeze(x.unsqueeze(0)); }},
      {"unsqueeze", [](const Tensor& x) { return unsqueeze(x, 1); }},
      {"flatten", [](const Tensor& x) { return flatten(x); }},
      {"contiguous", [](const Tensor& x) { return contiguous(x.t()); }},
      {"clone", [](const Tensor& x) { return clone(x); }},
      {"to dtype", [](const Tensor& x) { return to(x, kFloat32); }},
      {"cat", [](const Tensor& x) { return cat({x, x}, 1); }},
      {"stack", [](const Tensor& x) { return stack({x, x}); }},
      {"split", [](const Tensor& x) { return split(x, 2, 1)[1]; }},
      {"split_with_sizes", [](const Tensor& x) { return split_with_sizes(x, {1, 3}, 1)[1]; }},
      {"chunk", [](const Tensor& x) { return chunk(x, 2, 0)[0]; }},
      {"index_select", [](const Tensor& x) { return index_select(x, 1, idx({3, 0})); }},
      {"gather", [](const Tensor& x) { return gather(x, 1, idx({0, 1, 2}).view({3, 1})); }},
      {"scatter_add", [](const Tensor& x) { return scatter_add(x, 1, idx({0, 1, 2}).view({3, 1}), x); }},
      {"index_add", [](const Tensor& x) { return index_add(x, 0, idx({1}), x.narrow(0, 0, 1)); }},
      {"embedding", [](const Tensor& x) { return embedding(x, idx({2, 0, 2})); }},
      {"binary", [](const Tensor& x) { return binary(BinaryKind::mul, x, x); }},
      {"gelu tanh", [](const Tensor& x) { return gelu(x, "tanh"); }},
      {"softplus", [](const Tensor& x) { return softplus(x, 2.0); }},
      {"leaky_relu", [](const Tensor& x) { return leaky_relu(x - 0.5); }},
      {"elu", [](const Tensor& x) { return elu(x - 0.5); }},
      {"hardtanh", [](const Tensor& x) { return hardtanh(x, 0.2, 0.8); }},
      {"hardswish", [](const Tensor& x) { return hardswish(x); }},
      {"clamp tensor bounds", [](const Tensor& x) { return clamp(x, full({4}, 0.3, kFloat64), Tensor()); }},
      {"flip", [](const Tensor& x) { return flip(x, {0}); }},
      {"roll", [](const Tensor& x) { return roll(x, {1}, {1}); }},
      {"repeat", [](const Tensor& x) { return repeat(x, {2, 1}); }},
      {"tile", [](const Tensor& x) { return tile(x, {2}); }},
      {"tril", [](const Tensor& x) { return tril(x); }},
      {"triu", [](const Tensor& x) { return triu(x); }},
      {"pad", [](const Tensor& x) { return pad(x, {1, 1}, PadMode::reflect); }},
      {"vector_norm", [](const Tensor& x) { return linalg::vector_norm(x, 2, {1}); }},
      {"norm", [](const Tensor& x) { return norm(x); }},
      {"addmm", [](const Tensor& x) { return addmm(x, x, eye_like4(x)); }},
      {"baddbmm", [](const Tensor& x) { return baddbmm(x.unsqueeze(0), x.unsqueeze(0), eye_like4(x).unsqueeze(0)); }},
      {"einsum", [](const Tensor& x) { return einsum("ij,kj->ik", {x, x}); }},
      {"sort", [](const Tensor& x) { return std::get<0>(sort(x, 1)); }},
      {"topk", [](const Tensor& x) { return std::get<0>(topk(x, 2)); }},
      {"cumsum", [](const Tensor& x) { return cumsum(x, 1); }},
      {"cumprod", [](const Tensor& x) { return cumprod(x, 1); }},
  };
  return ops;
}

/// Ops whose result is integer or boolean: nothing to differentiate (as in PyTorch).
const std::vector<PublicOp>& non_differentiable_ops() {
  static const std::vector<PublicOp> ops = {
      {"eq", [](const Tensor& x) { return eq(x, x); }},
      {"ne", [](const Tensor& x) { return ne(x, x); }},
      {"lt", [](const Tensor& x) { return lt(x, x); }},
      {"le", [](const Tensor& x) { return le(x, x); }},
      {"gt", [](const Tensor& x) { return gt(x, x); }},
      {"ge", [](const Tensor& x) { return ge(x, x); }},
      {"argmax", [](const Tensor& x) { return argmax(x, 1); }},
      {"argmin", [](const Tensor& x) { return argmin(x, 1); }},
      {"max(dim) indices", [](const Tensor& x) { return std::get<1>(max(x, 1)); }},
      {"one_hot", [](const Tensor& x) { return one_hot(argmax(x, 1), 4); }},
      {"argsort", [](const Tensor& x) { return argsort(x, 1); }},
      {"topk indices", [](const Tensor& x) { return std::get<1>(topk(x, 2)); }},
  };
  return ops;
}

Tensor input() { return (rand({3, 4}, kFloat64) + 0.1).set_requires_grad(true); }

}  // namespace

TEST_CASE("every public op PyTorch differentiates records a gradient, and sends one to its input") {
  for (const PublicOp& op : differentiable_ops()) {
    CAPTURE(op.name);
    Tensor x = input();
    Tensor y = op.call(x);
    REQUIRE(y.requires_grad());
    y.to(kFloat64).sum().backward();
    CHECK(x.grad().defined());
  }
}

TEST_CASE("ops with integer or boolean results are explicitly non-differentiable") {
  for (const PublicOp& op : non_differentiable_ops()) {
    CAPTURE(op.name);
    Tensor y = op.call(input());
    CHECK_FALSE(is_floating(y.dtype()));
    CHECK_FALSE(y.requires_grad());
  }
}
