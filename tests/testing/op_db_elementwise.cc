// Rows of the op database: elementwise unary and binary ops (each with an f64 scalar reference),
// comparisons, where/masked_fill, clamp with scalar and tensor bounds, and the pinned gradients at
// kinks (PyTorch's, measured with tests/testing/torch_compare.py).
#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "core/error.h"
#include "core/op_kinds.h"
#include "tests/testing/op_db.h"

namespace kiln::test {

namespace {

double sigmoid_ref(double x) { return 1 / (1 + std::exp(-x)); }
double gelu_ref(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh_ref(double v) { return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))); }

const Arg kX{{3, 4}, -3, 3};      // unary input over the interesting range
const Arg kPos{{3, 4}, 0.1, 2.1};  // a positive domain
const Arg kFar{{3, 4}, -1000, 1000};  // far into saturation
const double kNan = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

OpInfo unary(std::string name, std::function<Tensor(const Tensor&)> f, std::string torch,
             std::function<double(double)> ref, Arg arg = kX) {
  return {.name = std::move(name), .args = {std::move(arg)}, .fn = [f](In v) { return f(v[0]); },
          .torch = std::move(torch), .ref1 = std::move(ref)};
}

OpInfo binary(std::string name, std::function<Tensor(const Tensor&, const Tensor&)> f, std::string torch,
              std::function<double(double, double)> ref, Arg a = {{3, 4}}, Arg b = {{4}}) {
  return {.name = std::move(name), .args = {std::move(a), std::move(b)}, .fn = [f](In v) { return f(v[0], v[1]); },
          .torch = std::move(torch), .ref2 = std::move(ref)};
}

OpInfo comparison(std::string name, std::function<Tensor(const Tensor&, const Tensor&)> f, std::string torch,
                  std::function<double(double, double)> ref, Arg b = {{4}}) {
  OpInfo r = binary(std::move(name), std::move(f), std::move(torch), std::move(ref), {{3, 4}}, std::move(b));
  r.differentiable = false;
  return r;
}

}  // namespace

std::vector<OpInfo> elementwise_rows() {
  std::vector<OpInfo> rows = {
      // ---- unary: rows of core/elementwise_ops.h, PyTorch's definitions
      unary("neg", [](const Tensor& x) { return -x; }, "-v[0]", [](double v) { return -v; }),
      unary("abs", [](const Tensor& x) { return abs(x); }, "torch.abs(v[0])", [](double v) { return std::fabs(v); }),
      unary("exp", [](const Tensor& x) { return exp(x); }, "torch.exp(v[0])", [](double v) { return std::exp(v); }),
      unary("log", [](const Tensor& x) { return log(x); }, "torch.log(v[0])", [](double v) { return std::log(v); }, kPos),
      unary("log1p", [](const Tensor& x) { return log1p(x); }, "torch.log1p(v[0])",
            [](double v) { return std::log1p(v); }, kPos),
      unary("expm1", [](const Tensor& x) { return expm1(x); }, "torch.expm1(v[0])", [](double v) { return std::expm1(v); }),
      unary("sqrt", [](const Tensor& x) { return sqrt(x); }, "torch.sqrt(v[0])", [](double v) { return std::sqrt(v); }, kPos),
      unary("rsqrt", [](const Tensor& x) { return rsqrt(x); }, "torch.rsqrt(v[0])",
            [](double v) { return 1 / std::sqrt(v); }, kPos),
      unary("sin", [](const Tensor& x) { return sin(x); }, "torch.sin(v[0])", [](double v) { return std::sin(v); }),
      unary("cos", [](const Tensor& x) { return cos(x); }, "torch.cos(v[0])", [](double v) { return std::cos(v); }),
      unary("tanh", [](const Tensor& x) { return tanh(x); }, "torch.tanh(v[0])", [](double v) { return std::tanh(v); }),
      unary("sigmoid", [](const Tensor& x) { return sigmoid(x); }, "torch.sigmoid(v[0])", sigmoid_ref),
      unary("relu", [](const Tensor& x) { return relu(x); }, "torch.relu(v[0])", [](double v) { return v > 0 ? v : 0.0; }),
      unary("gelu", [](const Tensor& x) { return gelu(x); }, "F.gelu(v[0])", gelu_ref),
      unary("gelu tanh", [](const Tensor& x) { return gelu(x, "tanh"); }, "F.gelu(v[0], approximate='tanh')",
            gelu_tanh_ref),
      unary("silu", [](const Tensor& x) { return silu(x); }, "F.silu(v[0])", [](double v) { return v * sigmoid_ref(v); }),
      unary("square", [](const Tensor& x) { return square(x); }, "torch.square(v[0])", [](double v) { return v * v; }),
      unary("reciprocal", [](const Tensor& x) { return reciprocal(x); }, "torch.reciprocal(v[0])",
            [](double v) { return 1 / v; }, kPos),
      unary("sign", [](const Tensor& x) { return sign(x); }, "torch.sign(v[0])",
            [](double v) { return double((v > 0) - (v < 0)); }),
      unary("pow 3", [](const Tensor& x) { return pow(x, 3); }, "torch.pow(v[0], 3)", [](double v) { return v * v * v; }),
      unary("pow 2.5", [](const Tensor& x) { return pow(x, 2.5); }, "torch.pow(v[0], 2.5)",
            [](double v) { return std::pow(v, 2.5); }, kPos),
      unary("pow 0.5", [](const Tensor& x) { return pow(x, 0.5); }, "torch.pow(v[0], 0.5)",
            [](double v) { return std::sqrt(v); }, kPos),
      unary("pow -0.5", [](const Tensor& x) { return x.pow(-0.5); }, "torch.pow(v[0], -0.5)",
            [](double v) { return std::pow(v, -0.5); }, kPos),
      unary("pow scalar base", [](const Tensor& x) { return pow(2.0, x); }, "torch.pow(2.0, v[0])",
            [](double v) { return std::pow(2.0, v); }),
      unary("clamp", [](const Tensor& x) { return clamp(x, -0.5, 1.0); }, "torch.clamp(v[0], -0.5, 1.0)",
            [](double v) { return std::min(std::max(v, -0.5), 1.0); }),
      unary("clamp integer bounds", [](const Tensor& x) { return clamp(x, -2, 2); }, "torch.clamp(v[0], -2, 2)",
            [](double v) { return std::min(std::max(v, -2.0), 2.0); }),
      unary("clamp min only", [](const Tensor& x) { return clamp(x, -0.5, std::nullopt); }, "torch.clamp(v[0], min=-0.5)",
            [](double v) { return std::max(v, -0.5); }),
      unary("clamp max only", [](const Tensor& x) { return clamp(x, std::nullopt, 0.8); }, "torch.clamp(v[0], max=0.8)",
            [](double v) { return std::min(v, 0.8); }),
      unary("softplus", [](const Tensor& x) { return softplus(x); }, "F.softplus(v[0])",
            [](double v) { return std::log1p(std::exp(v)); }),
      unary("softplus beta 2 threshold 1", [](const Tensor& x) { return softplus(x, 2, 1); },
            "F.softplus(v[0], beta=2, threshold=1)",
            [](double v) { return 2 * v > 1 ? v : std::log1p(std::exp(2 * v)) / 2; }),
      unary("softplus beta 2 threshold 1.5", [](const Tensor& x) { return softplus(x, 2.0, 1.5); },
            "F.softplus(v[0], beta=2, threshold=1.5)",
            [](double v) { return 2 * v > 1.5 ? v : std::log1p(std::exp(2 * v)) / 2; }),
      unary("softplus beta 2 threshold 3", [](const Tensor& x) { return softplus(x, 2.0, 3.0); },
            "F.softplus(v[0], beta=2, threshold=3)",
            [](double v) { return 2 * v > 3 ? v : std::log1p(std::exp(2 * v)) / 2; }),
      unary("leaky_relu", [](const Tensor& x) { return leaky_relu(x); }, "F.leaky_relu(v[0])",
            [](double v) { return v > 0 ? v : 0.01 * v; }),
      unary("leaky_relu 0.2", [](const Tensor& x) { return leaky_relu(x, 0.2); }, "F.leaky_relu(v[0], 0.2)",
            [](double v) { return v > 0 ? v : 0.2 * v; }),
      unary("elu 1.5", [](const Tensor& x) { return elu(x, 1.5); }, "F.elu(v[0], 1.5)",
            [](double v) { return v > 0 ? v : 1.5 * (std::exp(v) - 1); }),
      unary("elu 1.7", [](const Tensor& x) { return elu(x, 1.7); }, "F.elu(v[0], 1.7)",
            [](double v) { return v > 0 ? v : 1.7 * (std::exp(v) - 1); }),
      unary("hardtanh", [](const Tensor& x) { return hardtanh(x, -0.5, 2); }, "F.hardtanh(v[0], -0.5, 2.0)",
            [](double v) { return std::min(std::max(v, -0.5), 2.0); }),
      unary("hardtanh -1.5 2", [](const Tensor& x) { return hardtanh(x, -1.5, 2.0); }, "F.hardtanh(v[0], -1.5, 2.0)",
            [](double v) { return std::min(std::max(v, -1.5), 2.0); }),
      unary("hardswish", [](const Tensor& x) { return hardswish(x); }, "F.hardswish(v[0])",
            [](double v) { return v * std::min(std::max(v + 3, 0.0), 6.0) / 6; }, {{4, 5}, -5, 5}),
      unary("exp through a transposed view", [](const Tensor& x) { return x.t().exp(); }, "v[0].t().exp()",
            {}, {{3, 4}}),
      unary("gelu tanh of a transposed view", [](const Tensor& x) { return gelu(x.t(), "tanh"); },
            "F.gelu(v[0].t(), approximate='tanh')", {}),

      // ---- binary with broadcasting (a [3, 4] with b [4] unless said)
      binary("add", [](const Tensor& a, const Tensor& b) { return a + b; }, "v[0] + v[1]",
             [](double x, double y) { return x + y; }),
      binary("add alpha 0.5", [](const Tensor& a, const Tensor& b) { return add(a, b, 0.5); }, "torch.add(v[0], v[1], alpha=0.5)",
             [](double x, double y) { return x + 0.5 * y; }),
      binary("add alpha 2.5 column", [](const Tensor& a, const Tensor& b) { return add(a, b, 2.5); },
             "torch.add(v[0], v[1], alpha=2.5)", [](double x, double y) { return x + 2.5 * y; }, {{3, 4}}, {{3, 1}}),
      binary("sub", [](const Tensor& a, const Tensor& b) { return a - b; }, "v[0] - v[1]",
             [](double x, double y) { return x - y; }, {{3, 4}}, {{3, 1}}),
      binary("sub alpha 3", [](const Tensor& a, const Tensor& b) { return sub(a, b, 3); }, "torch.sub(v[0], v[1], alpha=3)",
             [](double x, double y) { return x - 3 * y; }),
      binary("mul", [](const Tensor& a, const Tensor& b) { return a * b; }, "v[0] * v[1]",
             [](double x, double y) { return x * y; }),
      binary("div", [](const Tensor& a, const Tensor& b) { return a / b; }, "v[0] / v[1]",
             [](double x, double y) { return x / y; }, {{3, 4}}, {{4}, 0.5, 2}),
      binary("maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }, "torch.maximum(v[0], v[1])",
             [](double x, double y) { return std::max(x, y); }, {{3, 4}}, {{3, 1}}),
      binary("minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }, "torch.minimum(v[0], v[1])",
             [](double x, double y) { return std::min(x, y); }),
      binary("pow", [](const Tensor& a, const Tensor& b) { return pow(a, b); }, "torch.pow(v[0], v[1])",
             [](double x, double y) { return std::pow(x, y); }, {{3, 4}, 0.5, 2}),
      binary("pow nonnegative exponent", [](const Tensor& a, const Tensor& b) { return pow(a, b); },
             "torch.pow(v[0], v[1])", [](double x, double y) { return std::pow(x, y); }, {{3, 4}, 0.6, 3}, {{4}, 0, 3}),
      {"add broadcast", {{{3, 1, 4}}, {{5, 1}}}, [](In v) { return v[0] + v[1]; }, "v[0] + v[1]"},
      {"mul size-1 dims", {{{1, 4}}, {{3, 1}}}, [](In v) { return v[0] * v[1]; }, "v[0] * v[1]"},
      {"mul self", {{{3, 4}}}, [](In v) { return mul(v[0], v[0]); }, "v[0] * v[0]"},
      {"binary mul kind", {{{3, 4}}}, [](In v) { return binary(BinaryKind::mul, v[0], v[0]); }, "v[0] * v[0]"},
      {"add self alpha 2", {{{3, 4}}}, [](In v) { return add(v[0], v[0], 2); }, "torch.add(v[0], v[0], alpha=2)"},
      unary("mul by a number, add a number", [](const Tensor& x) { return x * 3.0 + 1.0; }, "v[0] * 3.0 + 1.0",
            [](double v) { return v * 3 + 1; }),
      unary("mul by an integer on the left", [](const Tensor& x) { return 3 * x; }, "3 * v[0]",
            [](double v) { return 3 * v; }),
      unary("add a number", [](const Tensor& x) { return x + 2.5; }, "v[0] + 2.5", [](double v) { return v + 2.5; }),
      unary("sub from a number", [](const Tensor& x) { return 2.5 - x; }, "2.5 - v[0]", [](double v) { return 2.5 - v; }),
      unary("sub a number", [](const Tensor& x) { return x - 1; }, "v[0] - 1", [](double v) { return v - 1; }),
      unary("div by a number", [](const Tensor& x) { return x / 4; }, "v[0] / 4", [](double v) { return v / 4; }),
      unary("div a number by a tensor", [](const Tensor& x) { return 2.0 / x; }, "2.0 / v[0]",
            [](double v) { return 2 / v; }, {{3, 4}, 0.5, 2}),
      {"maximum with a constant", {{{3, 4}, 0.1, 1.1}},
       [](In v) { return maximum(v[0], constant(v[0], {4}, 0.5)); }, "torch.maximum(v[0], torch.full((4,), 0.5, dtype=v[0].dtype))"},

      // ---- selection
      {"where", {{{3, 4}}, {{4}}}, [](In v) { return where(v[0] > 0.0, v[0], v[1]); }, "torch.where(v[0] > 0, v[0], v[1])"},
      {"where with a number", {{{3, 4}, 0.1, 1.1}}, [](In v) { return where(v[0] > 0.5, v[0], 0.0); },
       "torch.where(v[0] > 0.5, v[0], 0.0)"},
      {"masked_fill", {{{3, 4}}}, [](In v) { return masked_fill(v[0], v[0] > 0.2, 0.0); },
       "v[0].masked_fill(v[0] > 0.2, 0.0)"},
      {"masked_fill broadcast mask", {{{3, 4}}},
       [](In v) { return masked_fill(v[0], ints(v[0], {1, 0, 0, 1}, {4}) > Scalar(0), 2.0); },
       "v[0].masked_fill(ints([1, 0, 0, 1]) > 0, 2.0)"},
      {"clamp tensor bounds", {{{3, 4}}, {{4}}, {{3, 1}}}, [](In v) { return clamp(v[0], v[1] - 0.5, v[2] + 0.5); },
       "torch.clamp(v[0], v[1] - 0.5, v[2] + 0.5)"},
      {"clamp tensor min only", {{{3, 4}, 0.1, 1.1}}, [](In v) { return clamp(v[0], constant(v[0], {4}, 0.3), Tensor()); },
       "torch.clamp(v[0], min=torch.full((4,), 0.3, dtype=v[0].dtype))"},

      // ---- comparisons: boolean results, nothing to differentiate (as in PyTorch); ties come from
      // the integer inputs (the driver's i32/i64 pass draws from [-1, 1] rounded)
      comparison("eq", [](const Tensor& a, const Tensor& b) { return eq(a, b); }, "torch.eq(v[0], v[1])",
                 [](double x, double y) { return double(x == y); }),
      comparison("ne", [](const Tensor& a, const Tensor& b) { return ne(a, b); }, "torch.ne(v[0], v[1])",
                 [](double x, double y) { return double(x != y); }),
      comparison("lt", [](const Tensor& a, const Tensor& b) { return lt(a, b); }, "torch.lt(v[0], v[1])",
                 [](double x, double y) { return double(x < y); }),
      comparison("le", [](const Tensor& a, const Tensor& b) { return le(a, b); }, "torch.le(v[0], v[1])",
                 [](double x, double y) { return double(x <= y); }, {{3, 1}}),
      comparison("gt", [](const Tensor& a, const Tensor& b) { return a > b; }, "torch.gt(v[0], v[1])",
                 [](double x, double y) { return double(x > y); }, {{3, 1}}),
      comparison("ge", [](const Tensor& a, const Tensor& b) { return ge(a, b); }, "torch.ge(v[0], v[1])",
                 [](double x, double y) { return double(x >= y); }),
      {.name = "eq self", .args = {{{3, 4}}}, .fn = [](In v) { return eq(v[0], v[0].t().t()); },
       .torch = "torch.eq(v[0], v[0])", .differentiable = false},
      {.name = "gt a number", .args = {{{3, 4}}}, .fn = [](In v) { return v[0] > Scalar(0.25); },
       .torch = "torch.gt(v[0], 0.25)", .differentiable = false, .ref1 = [](double x) { return double(x > 0.25); }},

      // ---- saturating functions far out, where a naive formula overflows to NaN (values and
      // gradients must stay finite)
      unary("sigmoid saturates", [](const Tensor& x) { return sigmoid(x); }, "torch.sigmoid(v[0])", sigmoid_ref, kFar),
      unary("tanh saturates", [](const Tensor& x) { return tanh(x); }, "torch.tanh(v[0])",
            [](double v) { return std::tanh(v); }, kFar),
      unary("silu saturates", [](const Tensor& x) { return silu(x); }, "F.silu(v[0])",
            [](double v) { return v * sigmoid_ref(v); }, kFar),
      unary("gelu saturates", [](const Tensor& x) { return gelu(x); }, "F.gelu(v[0])", gelu_ref, kFar),
      unary("gelu tanh saturates", [](const Tensor& x) { return gelu(x, "tanh"); }, "F.gelu(v[0], approximate='tanh')",
            gelu_tanh_ref, kFar),
      unary("softplus saturates", [](const Tensor& x) { return softplus(x); }, "F.softplus(v[0])",
            [](double v) { return v > 20 ? v : std::log1p(std::exp(v)); }, kFar),
      unary("elu saturates", [](const Tensor& x) { return elu(x, 1.5); }, "F.elu(v[0], 1.5)",
            [](double v) { return v > 0 ? v : 1.5 * std::expm1(v); }, kFar),
  };

  // The autocast policy entries of the registry (its amp column is fp32), one row each.
  const std::pair<const char*, const char*> amp[] = {
      {"exp", "exp"},         {"log", "log"},       {"log1p", "log1p"}, {"expm1", "expm1"},
      {"rsqrt", "rsqrt"},     {"reciprocal", "reciprocal"},              {"pow 2.5", "pow_scalar"},
      {"pow", "pow"},         {"softplus beta 2 threshold 1", "softplus"}};
  for (const auto& [row, entry] : amp)
    for (OpInfo& r : rows)
      if (r.name == row) r.amp = entry;

  // Rows that also run on i32/i64 inputs, with the result dtype PyTorch gives (measured with
  // torch 2.15): integer-preserving ops keep the dtype, float ops and float operands give f32.
  const Integers keep = Integers::keep, to_float = Integers::to_float;
  const std::pair<const char*, Integers> integer_rows[] = {
      {"neg", keep},        {"abs", keep},           {"relu", keep},          {"square", keep},
      {"sign", keep},       {"pow 3", keep},         {"clamp integer bounds", keep},
      {"add", keep},        {"sub", keep},           {"sub alpha 3", keep},   {"mul", keep},
      {"maximum", keep},    {"minimum", keep},       {"pow nonnegative exponent", keep},
      {"mul by an integer on the left", keep},       {"sub a number", keep},
      {"eq", keep},         {"ne", keep},            {"lt", keep},            {"le", keep},
      {"gt", keep},         {"ge", keep},            {"gt a number", keep},
      {"exp", to_float},    {"sqrt", to_float},      {"sigmoid", to_float},   {"div", to_float},
      {"clamp", to_float},  {"clamp max only", to_float},                     {"pow scalar base", to_float},
      {"mul by a number, add a number", to_float},   {"add a number", to_float},
      {"sub from a number", to_float},               {"div by a number", to_float}};
  for (const auto& [name, integers] : integer_rows) {
    auto it = std::find_if(rows.begin(), rows.end(), [&](const OpInfo& r) { return r.name == name; });
    KILN_CHECK(it != rows.end(), "op_db: no row '{}' for the integer list", name);
    it->integers = integers;
  }
  // The registry kind each reference row checks: the kind of the same name, or these.
  std::set<std::string> kind_names;
  for (int k = 0; k < kNumUnaryKinds; ++k) kind_names.emplace(kind_name(static_cast<UnaryKind>(k)));
  for (int k = 0; k < kNumBinaryKinds; ++k) kind_names.emplace(kind_name(static_cast<BinaryKind>(k)));
  for (int k = 0; k <= static_cast<int>(CompareKind::ge); ++k) kind_names.emplace(kind_name(static_cast<CompareKind>(k)));
  const std::pair<const char*, const char*> aliases[] = {{"pow 3", "pow_scalar"}, {"gelu tanh", "gelu_tanh"}, {"elu 1.5", "elu"}};
  for (OpInfo& r : rows) {
    if (!r.ref1 && !r.ref2) continue;
    if (kind_names.count(r.name)) r.kind = r.name;
    for (const auto& [row, kind] : aliases)
      if (r.name == row) r.kind = kind;
  }

  // ---- gradients where the derivative is undefined, pinned to PyTorch 2.15's (measured): finite
  // differences cannot check these. Inputs at the bounds, ties and kinks; gradients of sum(fn).
  const double n = kNan;
  std::vector<OpInfo> kinks = {
      {.name = "clamp at its bounds", .args = {{.shape = {6}, .values = {-0.5, 0.5, -1, 1, 0, n}}},
       .fn = [](In v) { return clamp(v[0], -0.5, 0.5); }, .torch = "torch.clamp(v[0], -0.5, 0.5)",
       .gradcheck = false, .grads = {{0, 0, 0, 0, 1, 0}}},
      {.name = "clamp min only at its bound", .args = {{.shape = {3}, .values = {-1, -2, 0}}},
       .fn = [](In v) { return clamp(v[0], -1.0, std::nullopt); }, .torch = "torch.clamp(v[0], min=-1.0)",
       .gradcheck = false, .grads = {{0, 0, 1}}},
      {.name = "clamp max only at its bound", .args = {{.shape = {3}, .values = {2, 3, 0}}},
       .fn = [](In v) { return clamp(v[0], std::nullopt, 2.0); }, .torch = "torch.clamp(v[0], max=2.0)",
       .gradcheck = false, .grads = {{0, 0, 1}}},
      {.name = "clamp tensor bounds at ties",
       .args = {{.shape = {7}, .values = {-0.5, 0.5, -1, 1, 0, n, 0.7}},
                {.shape = {7}, .values = {-0.5, -0.5, -0.5, -0.5, -0.5, -0.5, 0.8}},
                {.shape = {7}, .values = {0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.6}}},
       .fn = [](In v) { return clamp(v[0], v[1], v[2]); }, .torch = "torch.clamp(v[0], v[1], v[2])",
       .gradcheck = false,
       .grads = {{0.5, 0.5, 0, 0, 1, 1, 0}, {0.5, 0, 1, 0, 0, 0, 0}, {0, 0.5, 0, 1, 0, 0, 1}}},
      {.name = "clamp tensor min only at ties",
       .args = {{.shape = {6}, .values = {-0.5, 0.5, -1, 1, 0, n}}, {.shape = {6}, .values = {-0.5, -0.5, -0.5, -0.5, -0.5, -0.5}}},
       .fn = [](In v) { return clamp(v[0], v[1], Tensor()); }, .torch = "torch.clamp(v[0], min=v[1])",
       .gradcheck = false, .grads = {{0.5, 1, 0, 1, 1, 1}, {0.5, 0, 1, 0, 0, 1}}},
      {.name = "clamp tensor bounds NaN bound",
       .args = {{.shape = {3}, .values = {0, 1, n}}, {.shape = {3}, .values = {n, 0, 0}}, {.shape = {3}, .values = {1, n, 1}}},
       .fn = [](In v) { return clamp(v[0], v[1], v[2]); }, .torch = "torch.clamp(v[0], v[1], v[2])",
       .gradcheck = false, .grads = {{1, 1, 1}, {0, 0, 0}, {0, 0, 0}}},
      {.name = "maximum ties and NaN", .args = {{.shape = {3}, .values = {1, n, 2}}, {.shape = {3}, .values = {1, 1, n}}},
       .fn = [](In v) { return maximum(v[0], v[1]); }, .torch = "torch.maximum(v[0], v[1])",
       .gradcheck = false, .grads = {{0.5, 1, 1}, {0.5, 1, 1}}},
      {.name = "minimum ties and NaN", .args = {{.shape = {3}, .values = {1, n, 2}}, {.shape = {3}, .values = {1, 1, n}}},
       .fn = [](In v) { return minimum(v[0], v[1]); }, .torch = "torch.minimum(v[0], v[1])",
       .gradcheck = false, .grads = {{0.5, 1, 1}, {0.5, 1, 1}}},
      {.name = "hardswish at -3 and 3", .args = {{.shape = {5}, .values = {-3, 3, -4, 4, 0}}},
       .fn = [](In v) { return hardswish(v[0]); }, .torch = "F.hardswish(v[0])",
       .gradcheck = false, .grads = {{0, 1, 0, 1, 0.5}}},
      {.name = "hardtanh at its bounds and NaN", .args = {{.shape = {4}, .values = {-1, 2, 0.5, n}}},
       .fn = [](In v) { return hardtanh(v[0], -1.0, 2.0); }, .torch = "F.hardtanh(v[0], -1.0, 2.0)",
       .gradcheck = false, .grads = {{0, 0, 1, 1}}},
      {.name = "relu at 0 and NaN", .args = {{.shape = {3}, .values = {0, 1, n}}}, .fn = [](In v) { return relu(v[0]); },
       .torch = "torch.relu(v[0])", .gradcheck = false, .grads = {{0, 1, 1}}},
      {.name = "leaky_relu at 0 and NaN", .args = {{.shape = {2}, .values = {0, n}}},
       .fn = [](In v) { return leaky_relu(v[0], 0.1); }, .torch = "F.leaky_relu(v[0], 0.1)", .gradcheck = false,
       .grads = {{0.1, 0.1}}},
      {.name = "elu at 0 and NaN", .args = {{.shape = {2}, .values = {0, n}}}, .fn = [](In v) { return elu(v[0], 1.5); },
       .torch = "F.elu(v[0], 1.5)", .gradcheck = false, .grads = {{1.5, 1}}},
      {.name = "log at 0", .args = {{.shape = {2}, .values = {0, 1}}}, .fn = [](In v) { return log(v[0]); },
       .torch = "torch.log(v[0])", .gradcheck = false, .grads = {{kInf, 1}}},
      {.name = "exp overflows", .args = {{.shape = {2}, .values = {1000, 0}}}, .fn = [](In v) { return exp(v[0]); },
       .torch = "torch.exp(v[0])", .gradcheck = false, .grads = {{kInf, 1}}},
      {.name = "binary_cross_entropy_with_logits at 0",
       .args = {{.shape = {3}, .values = {0, 0, 0}}, {.shape = {3}, .values = {0.25, 1, 0}}},
       .fn = [](In v) { return F::binary_cross_entropy_with_logits(v[0], v[1], F::Reduction::sum); },
       .torch = "F.binary_cross_entropy_with_logits(v[0], v[1], reduction='sum')", .gradcheck = false,
       .grads = {{0.25, -0.5, 0.5}, {0, 0, 0}}},
      {.name = "abs at 0", .args = {{.shape = {2}, .values = {0, -1}}}, .fn = [](In v) { return abs(v[0]); },
       .torch = "torch.abs(v[0])", .gradcheck = false, .grads = {{0, -1}}},
  };
  for (OpInfo& k : kinks) rows.push_back(std::move(k));
  return rows;
}

}  // namespace kiln::test
