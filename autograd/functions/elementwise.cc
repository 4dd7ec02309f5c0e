// Backward formulas of the elementwise family: unary (from the registry rows of
// core/elementwise_ops.h), binary, where.
#include <cmath>

#include "autograd/functions/common.h"

namespace kiln::autograd {
namespace {

/// Records the unary op with what its registry row says backward reads (core/elementwise_ops.h);
/// the formula itself is the row's grad column, run by the unary_backward kernel.
Tensor unary_autograd(const UnaryOp& op, const Tensor& x) {
  Tensor y = forward_no_grad([&] { return op::unary.forward(op, x); });
  if (!is_floating(y.dtype())) return y;
  const UnarySaves saves = unary_saves(op.kind);
  SavedTensor s(saves == UnarySaves::output ? y : saves == UnarySaves::input ? x : Tensor());
  const std::string name = backward_name(kind_name(op.kind));
  record(name.c_str(), {x}, {y}, [op, s, name](const std::vector<Tensor>& g) -> std::vector<Tensor> {
    const Tensor saved = s.unpack(name.c_str());
    return {unary_backward(op, g[0], saved.defined() ? saved : g[0])};
  });
  return y;
}

Tensor binary_autograd(BinaryKind kind, const Tensor& a, const Tensor& b) {
  Tensor out = forward_no_grad([&] { return op::binary.forward(kind, a, b); });
  const std::string name = backward_name(kind_name(kind));
  const bool need_a = kind == BinaryKind::mul || kind == BinaryKind::div || kind == BinaryKind::pow ||
                      kind == BinaryKind::maximum || kind == BinaryKind::minimum;
  const bool need_b = need_a;
  SavedTensor sa(need_a ? a : Tensor()), sb(need_b ? b : Tensor());
  SavedTensor sout(kind == BinaryKind::pow || kind == BinaryKind::div ? out : Tensor());
  const Shape shape_a = a.sizes(), shape_b = b.sizes();
  record(name.c_str(), {a, b}, {out}, [=](const std::vector<Tensor>& gs) -> std::vector<Tensor> {
    const Tensor& g = gs[0];
    Tensor A = sa.unpack(name.c_str()), B = sb.unpack(name.c_str()), Y = sout.unpack(name.c_str());
    Tensor ga, gb;
    switch (kind) {
      case BinaryKind::add: ga = g; gb = g; break;
      case BinaryKind::sub: ga = g; gb = -g; break;
      case BinaryKind::mul: ga = g * B; gb = g * A; break;
      case BinaryKind::div: ga = g / B; gb = -g * Y / B; break;
      case BinaryKind::pow:
        ga = g * B * pow(A, B - 1);
        // d/db a^b = a^b log a; defined as 0 where a == 0 (as PyTorch does for b >= 0).
        gb = where(A == 0.0, 0.0, g * Y * log(where(A == 0.0, 1.0, A)));
        break;
      case BinaryKind::maximum:
      case BinaryKind::minimum: {
        // Ties split the gradient evenly, and a NaN on either side sends all of it to both, as
        // PyTorch 2.15 does (measured).
        const DType dt = g.dtype();
        Tensor a_wins = (kind == BinaryKind::maximum ? (A > B) : (A < B)).to(dt);
        Tensor b_wins = (kind == BinaryKind::maximum ? (A < B) : (A > B)).to(dt);
        Tensor ties = (A == B).to(dt) * 0.5;
        Tensor unordered = 1.0 - a_wins - b_wins - ties * 2.0;
        ga = g * (a_wins + ties + unordered);
        gb = g * (b_wins + ties + unordered);
        break;
      }
    }
    return {sum_to(ga, shape_a), sum_to(gb, shape_b)};
  });
  return out;
}

Tensor where_autograd(const Tensor& cond, const Tensor& a, const Tensor& b) {
  Tensor out = forward_no_grad([&] { return op::where.forward(cond, a, b); });
  SavedTensor sc(cond);
  const Shape shape_a = a.sizes(), shape_b = b.sizes();
  record("WhereBackward", {cond, a, b}, {out}, [=](const std::vector<Tensor>& gs) -> std::vector<Tensor> {
    Tensor c = sc.unpack("WhereBackward");
    return {Tensor(), sum_to(where(c, gs[0], 0.0), shape_a), sum_to(where(c, 0.0, gs[0]), shape_b)};
  });
  return out;
}

}  // namespace
}  // namespace kiln::autograd

KILN_REGISTER_AUTOGRAD(unary, &kiln::autograd::unary_autograd);
KILN_REGISTER_AUTOGRAD(binary, &kiln::autograd::binary_autograd);
KILN_REGISTER_AUTOGRAD(where, &kiln::autograd::where_autograd);
