// The random fills Tensor::uniform_, normal_ and bernoulli_, validated here once (rand, randn and randint
// validate in core/ops/creation.cc): the kernel slots of core/kernels.h (uniform, normal, randint,
// bernoulli) trust their contract (a contiguous output of a supported dtype, parameters already
// checked) on every device.
#include "core/grad_mode.h"
#include "core/kernels.h"
#include "core/ops.h"

namespace kiln {
namespace {

/// Draws into `t` through `draw(contiguous target)`: a strided view is filled through a
/// contiguous temporary and copied back, so any view can be filled. Never recorded by autograd.
template <class Draw> Tensor& fill_random(Tensor& t, const char* op, const Draw& draw) {
  KILN_CHECK(t.defined(), "{}: the tensor is undefined", op);
  KILN_CHECK(!t.requires_grad() || !GradMode::is_enabled(),
             "{}: cannot fill a tensor that requires grad while recording (shape {}); wrap it in NoGradGuard, as "
             "nn::init does",
             op, t.sizes());
  if (t.numel() == 0) return t;
  Tensor target = t.is_contiguous() ? t : make_tensor(t.sizes(), t.dtype(), t.device());
  draw(target);
  if (target.is_same(t)) {
    t.storage()->bump_version();
  } else {
    NoGradGuard g;
    t.copy_(target);
  }
  return t;
}

Generator& pick(Generator* gen) { return gen != nullptr ? *gen : default_generator(); }

}  // namespace

Tensor& Tensor::uniform_(double low, double high, Generator* gen) {
  Tensor& t = *this;
  KILN_CHECK(is_floating(t.dtype()), "uniform_: dtype {} is not supported (floating types only)", t.dtype());
  KILN_CHECK(low <= high, "uniform_: low {} must not exceed high {}", low, high);
  return fill_random(t, "uniform_", [&](Tensor& out) { kernels::uniform[out.device()](out, pick(gen), low, high); });
}

Tensor& Tensor::normal_(double mean, double std, Generator* gen) {
  Tensor& t = *this;
  KILN_CHECK(is_floating(t.dtype()), "normal_: dtype {} is not supported (floating types only)", t.dtype());
  KILN_CHECK(std >= 0, "normal_: std must be non-negative, got {}", std);
  return fill_random(t, "normal_", [&](Tensor& out) { kernels::normal[out.device()](out, pick(gen), mean, std); });
}

Tensor& Tensor::bernoulli_(double p, Generator* gen) {
  Tensor& t = *this;
  KILN_CHECK(p >= 0 && p <= 1, "bernoulli_: probability must be in [0, 1], got {}", p);
  return fill_random(t, "bernoulli_", [&](Tensor& out) { kernels::bernoulli[out.device()](out, pick(gen), p); });
}

}  // namespace kiln
