// Kiln's op database (PyTorch's OpInfo, ggml's test-backend-ops): one row per public op case,
// fused primitives included, with its sample inputs (broadcasting, size-0/1 dims, large values,
// values at kinks), its f32 tolerance, its autocast policy entry and the same computation in
// PyTorch. One driver (op_db_test.cc) runs every row through f64 gradcheck, f32 vs f64,
// contiguous vs non-contiguous, CUDA vs CPU and autocast; op_dump.cc + torch_compare.py run the
// rows against PyTorch. Adding an op is adding a row here (docs/adding_an_op.md).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/conv.h"
#include "nn/attention.h"
#include "nn/functional.h"

namespace kiln::test {

using In = const std::vector<Tensor>&;

/// One floating input of a row: uniform in [lo, hi), or the given values (pinned rows).
struct Arg {
  Shape shape;
  double lo = -1, hi = 1;
  /// Stays f32 when the driver makes low-precision inputs (the f32 operand of a `promote` op).
  bool keep_f32 = false;
  std::vector<double> values = {};
};

/// Whether an elementwise row also runs on i32/i64 inputs (the row's range rounded to integers):
/// `keep` gives a result of the input's integer dtype (bool for a comparison) equal to the
/// reference exactly; `to_float` an f32 result (true division, exp of an integer), as in PyTorch.
enum class Integers { no, keep, to_float };

struct OpInfo {
  std::string name;  // unique; starts with the op's name
  std::vector<Arg> args;
  std::function<Tensor(In)> fn;
  /// The same computation in PyTorch, a Python expression of `v` (the inputs, as tensors), `torch`,
  /// `F` (torch.nn.functional), `ints(values, shape)` (an int64 tensor) and `ce_weight_grad` (class
  /// weights torch does not differentiate), for torch_compare.py.
  std::string torch;
  double f32_tol = 1e-5;  // f32 result vs f64, relative and absolute
  /// The autocast policy entry (core/autocast_policy.h) this row stands for, if any.
  std::string amp = {};
  /// False: the result is integer or boolean; the driver checks it records no gradient.
  bool differentiable = true;
  /// False where finite differences cannot work (values at a kink): `grads` pins the gradients
  /// of sum(fn(v)) instead, as PyTorch gives them (torch_compare.py checks them again).
  bool gradcheck = true;
  std::vector<std::vector<double>> grads = {};
  double eps = 1e-6;  // gradcheck step
  /// An f64 scalar reference of an elementwise row, checked on large (threaded) and
  /// non-contiguous inputs, also in f16/bf16: unary ref1 or binary ref2.
  std::function<double(double)> ref1 = {};
  std::function<double(double, double)> ref2 = {};
  Integers integers = Integers::no;
  /// The registry kind (core/elementwise_ops.h: a UnaryKind, BinaryKind or CompareKind name) the
  /// reference of this row checks; every kind has at least one such row.
  std::string kind = {};
};

/// Row i's inputs as integers of `dtype` (i32/i64): the f64 draw of make_inputs rounded.
std::vector<Tensor> make_int_inputs(const OpInfo& row, size_t index, DType dtype);

/// Every row, in a fixed order (the seed of a row's inputs is its index).
const std::vector<OpInfo>& op_db();

/// The rows of one family (op_db_*.cc).
std::vector<OpInfo> elementwise_rows();
std::vector<OpInfo> reduction_rows();
std::vector<OpInfo> shape_rows();
std::vector<OpInfo> nn_rows();

/// Row i's inputs in `dtype` (drawn in f64, seeded by the row, so every backend and every dtype
/// sees the same values), converted to `as` when given (widened copies of low-precision values).
std::vector<Tensor> make_inputs(const OpInfo& row, size_t index, DType dtype, std::optional<DType> as = {});

/// Integer indices/targets on `like`'s device (a CPU index for a CUDA input is refused, as in PyTorch).
Tensor ints(const Tensor& like, std::vector<int64_t> v, const Shape& shape = {});
/// A constant of `like`'s dtype and device.
Tensor constant(const Tensor& like, const Shape& shape, double value);
/// f64 for an f64 tensor, else f32 (the running statistics of a batch norm row).
DType stat_dtype(const Tensor& like);

namespace F = nn::functional;

}  // namespace kiln::test
