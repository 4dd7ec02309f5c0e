// The memory-bound CPU kernels give the same bits at 1, 2, 3 and 4 threads: transcendental
// elementwise ops and their gradients (on aligned and misaligned contiguous data, f32 and f16),
// softmax / log_softmax, layer norm forward and backward, fused cross-entropy and the transposing
// copy, on sizes that are no multiple of the vector width, so that every split point moves.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <tuple>
#include <vector>

#include "core/generator.h"
#include "core/kernels.h"
#include "core/ops.h"
#include "core/ops/cross_entropy.h"
#include "core/ops/layer_norm.h"
#include "core/parallel.h"

using namespace kiln;

namespace {

std::vector<uint8_t> bytes_of(const Tensor& t) {
  Tensor c = t.contiguous();
  std::vector<uint8_t> b(static_cast<size_t>(c.numel() * c.element_size()));
  std::memcpy(b.data(), c.data_ptr(), b.size());
  return b;
}

/// The raw bits of every tensor f returns, computed with `threads` threads.
std::vector<std::vector<uint8_t>> bits_at(int threads, const std::function<std::vector<Tensor>()>& f) {
  const int saved = get_num_threads();
  set_num_threads(threads);
  std::vector<Tensor> out = f();
  set_num_threads(saved);
  std::vector<std::vector<uint8_t>> b;
  for (const Tensor& t : out) b.push_back(bytes_of(t));
  return b;
}

void check_same_bits_at_any_thread_count(const std::function<std::vector<Tensor>()>& f) {
  const auto one = bits_at(1, f);
  for (int t : {2, 3, 4}) {
    INFO("threads ", t);
    CHECK(bits_at(t, f) == one);
  }
}

/// An n-element contiguous f32 tensor `offset` elements into a larger one: misaligned for vectors.
Tensor at_offset(Tensor base, int64_t offset, int64_t n) { return base.narrow(0, offset, n); }

}  // namespace

TEST_CASE("transcendental elementwise ops and their gradients give the same bits at 1-4 threads") {
  manual_seed(3);
  const int64_t n = 70001;
  for (int64_t offset : {0, 3}) {
    for (DType dt : {kFloat32, kFloat16}) {
      INFO("offset ", offset, " dtype ", dtype_name(dt));
      Tensor x = at_offset(randn({n + offset}).to(dt), offset, n);
      Tensor g = randn({n}).to(dt);
      REQUIRE(x.is_contiguous());
      check_same_bits_at_any_thread_count([&] {
        std::vector<Tensor> r = {exp(x), tanh(x), sigmoid(x), silu(x), gelu(x), gelu(x, "tanh"), log(x * x + 0.5)};
        for (UnaryKind k : {UnaryKind::gelu, UnaryKind::gelu_tanh, UnaryKind::silu}) {
          // The gradient written `offset` elements into a buffer too.
          Tensor gx = at_offset(empty({n + offset}, dt), offset, n);
          kernels::unary_backward[kCPU](UnaryOp{k}, gx, g, x);
          r.push_back(gx);
        }
        return r;
      });
    }
  }
}

TEST_CASE("softmax, layer norm and cross-entropy give the same bits at 1-4 threads") {
  manual_seed(4);
  const int64_t M = 301, N = 1003;  // rows of a width that is no multiple of 8
  Tensor x = randn({M, N}) * 3.0, g = randn({M, N});
  Tensor w = randn({N}), b = randn({N});
  Tensor target = randint(0, N, {M});
  Tensor grad_loss = randn({M});
  check_same_bits_at_any_thread_count([&] {
    std::vector<Tensor> r = {softmax(x, 1), log_softmax(x, 1), softmax(x, 0)};
    auto [y, mean, rstd] = layer_norm_with_stats(x, w, b, 1, 1e-5);
    Tensor gx = empty({M, N}), gw = empty({N}), gb = empty({N});
    kernels::layer_norm_backward[kCPU](gx, gw, gb, g, x, mean, rstd, w);
    auto [loss, lse] = cross_entropy_with_lse(x, target, -100, 0.1);
    Tensor glogits = empty({M, N});
    kernels::cross_entropy_backward[kCPU](glogits, grad_loss, x, lse, target, -100, 0.1);
    for (const Tensor& t : {y, mean, rstd, gx, gw, gb, loss, lse, glogits}) r.push_back(t);
    return r;
  });
}

TEST_CASE("the transposing copy gives the same bits at 1-4 threads and matches indexing") {
  manual_seed(5);
  Tensor x = randn({515, 1030});  // several panels of columns, ragged tiles on both edges
  check_same_bits_at_any_thread_count([&] { return std::vector<Tensor>{x.t().contiguous()}; });
  Tensor t = x.t().contiguous();
  auto v = x.to_vector<float>(), tv = t.to_vector<float>();
  bool same = true;
  for (int64_t r = 0; r < 1030; ++r)
    for (int64_t c = 0; c < 515; ++c) same &= tv[r * 515 + c] == v[c * 1030 + r];
  CHECK(same);
}
