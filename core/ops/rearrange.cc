// Rearranging ops built from view, index_select and cat (so their gradients come from those
// primitives and every backend has them): flip, roll, repeat/tile, tril/triu, and clamp with
// tensor bounds.
#include <algorithm>

#include "core/ops.h"

namespace kiln {
namespace {

/// n-1, n-2, ..., 0 as an i64 index on `device`.
Tensor reversed_index(int64_t n, Device device) {
  return Scalar(n - 1) - arange(n, TensorOptions(kInt64).device(device));
}

}  // namespace

Tensor flip(const Tensor& x, const IntList& dims) {
  Tensor out = x;
  std::vector<bool> seen(std::max<int64_t>(x.dim(), 1), false);
  for (int64_t dim : dims) {
    const int64_t d = wrap_dim(dim, x.dim(), "flip");
    KILN_CHECK(!seen[d], "flip: dim {} appears more than once in {}", d, dims);
    seen[d] = true;
    if (x.dim() == 0) continue;
    out = out.index_select(d, reversed_index(x.size(d), x.device()));
  }
  return out.is_same(x) ? x.clone() : out;
}

Tensor roll(const Tensor& x, const IntList& shifts, const IntList& dims) {
  if (dims.empty()) {
    KILN_CHECK(shifts.size() == 1, "roll: without dims, exactly one shift is allowed (got {})", shifts);
    return roll(x.flatten(), shifts, {0}).view(x.sizes());
  }
  KILN_CHECK(shifts.size() == dims.size(), "roll: {} shifts for {} dims", shifts.size(), dims.size());
  Tensor out = x;
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = wrap_dim(dims[i], x.dim(), "roll");
    const int64_t n = x.size(d);
    if (n == 0) continue;
    const int64_t s = ((shifts[i] % n) + n) % n;
    if (s == 0) continue;
    out = cat({out.narrow(d, n - s, s), out.narrow(d, 0, n - s)}, d);
  }
  return out.is_same(x) ? x.clone() : out;
}

Tensor repeat(const Tensor& x, const IntList& repeats) {
  const int64_t n = static_cast<int64_t>(repeats.size());
  KILN_CHECK(n >= x.dim(), "repeat: {} repeats for a tensor with {} dims (shape {}): give at least one per dim",
             n, x.dim(), x.sizes());
  Shape padded(n - x.dim(), 1);
  padded.insert(padded.end(), x.sizes().begin(), x.sizes().end());
  // [s0, s1, ...] -> [1, s0, 1, s1, ...] -> expand [r0, s0, r1, s1, ...] -> [r0 * s0, r1 * s1, ...]
  Shape interleaved, expanded, out;
  for (int64_t i = 0; i < n; ++i) {
    KILN_CHECK(repeats[i] >= 0, "repeat: repeats must be non-negative, got {}", repeats);
    interleaved.insert(interleaved.end(), {1, padded[i]});
    expanded.insert(expanded.end(), {repeats[i], padded[i]});
    out.push_back(repeats[i] * padded[i]);
  }
  return x.reshape(interleaved).expand(expanded).reshape(out);
}

Tensor tile(const Tensor& x, const IntList& reps) {
  IntList r(std::max<int64_t>(0, x.dim() - static_cast<int64_t>(reps.size())), 1);
  r.insert(r.end(), reps.begin(), reps.end());
  return repeat(x, r);
}

namespace {

/// Keeps x[..., i, j] where keep(j - i) holds, zero elsewhere.
template <class Keep> Tensor triangle(const Tensor& x, const char* op, Keep keep) {
  KILN_CHECK(x.dim() >= 2, "{}: expected a tensor with at least 2 dims, got shape {}", op, x.sizes());
  const TensorOptions idx = TensorOptions(kInt64).device(x.device());
  Tensor offset = arange(x.size(-1), idx).unsqueeze(0) - arange(x.size(-2), idx).unsqueeze(1);
  return where(keep(offset), x, zeros({}, TensorOptions(x.dtype()).device(x.device())));
}

}  // namespace

Tensor tril(const Tensor& x, int64_t diagonal) {
  return triangle(x, "tril", [&](const Tensor& off) { return off <= Scalar(diagonal); });
}

Tensor triu(const Tensor& x, int64_t diagonal) {
  return triangle(x, "triu", [&](const Tensor& off) { return off >= Scalar(diagonal); });
}

Tensor clamp(const Tensor& x, const Tensor& min, const Tensor& max) {
  KILN_CHECK(min.defined() || max.defined(), "clamp: at least one of min and max must be given");
  // As torch.clamp: min first, then max (so max wins where min > max). Gradients as PyTorch 2.15's
  // (measured): those of maximum(x, min) and minimum(., max), so a tie splits the gradient evenly
  // between x and the bound; where the result is NaN with both bounds given, all of it goes to x.
  Tensor out = x;
  if (min.defined()) out = maximum(out, min);
  if (max.defined()) out = minimum(out, max);
  if (!min.defined() || !max.defined() || !is_floating(out.dtype())) return out;
  const Tensor value = out.detach();
  return where(value != value, x + value, out);
}

Tensor Tensor::flip(const IntList& dims) const { return kiln::flip(*this, dims); }
Tensor Tensor::roll(const IntList& shifts, const IntList& dims) const { return kiln::roll(*this, shifts, dims); }
Tensor Tensor::repeat(const IntList& repeats) const { return kiln::repeat(*this, repeats); }
Tensor Tensor::tile(const IntList& reps) const { return kiln::tile(*this, reps); }
Tensor Tensor::tril(int64_t diagonal) const { return kiln::tril(*this, diagonal); }
Tensor Tensor::triu(int64_t diagonal) const { return kiln::triu(*this, diagonal); }

}  // namespace kiln
