// The fused scaled_dot_product_attention against the composite of core ops (forward and
// backward, f32, shapes whose T is not a multiple of the 64-row tile), masks that broadcast,
// dropout regenerated in backward (its f64 gradcheck replays the generator), and its errors. The
// f64 gradchecks of every input and option are the op database's scaled_dot_product_attention rows.
#include <doctest/doctest.h>

#include <cmath>

#include "autograd/gradcheck.h"
#include "core/memory/memory_tracker.h"
#include "core/ops.h"
#include "core/ops/attention.h"
#include "core/parallel.h"
#include "nn/attention.h"
#include "tests/testing/compare.h"

namespace F = kiln::nn::functional;
using namespace kiln;
using kiln::test::max_diff;
using kiln::test::rel_diff;

namespace {

/// Fused and composite agree in f32 on output and on the gradients of q, k, v (and a float mask).
void check_against_composite(const Shape& qs, const Shape& ks, const Shape& vs, F::AttentionOptions o) {
  Tensor q = randn(qs).requires_grad_(), k = randn(ks).requires_grad_(), v = randn(vs).requires_grad_();
  const bool mask_grad = o.attn_mask.defined() && o.attn_mask.dtype() != kBool;
  if (mask_grad) o.attn_mask.requires_grad_();
  Tensor fused = F::scaled_dot_product_attention(q, k, v, o);
  Tensor ref = F::scaled_dot_product_attention_composite(q, k, v, o);
  REQUIRE(fused.shape() == ref.shape());
  CHECK(rel_diff(fused, ref) < 1e-5);
  Tensor w = randn(fused.shape());
  std::vector<Tensor> inputs = {q, k, v};
  if (mask_grad) inputs.push_back(o.attn_mask);
  (fused * w).sum().backward();
  std::vector<Tensor> g_fused;
  for (Tensor& t : inputs) g_fused.push_back(t.grad()), t.set_grad(Tensor());
  (ref * w).sum().backward();
  for (size_t i = 0; i < inputs.size(); ++i) {
    INFO("input ", i);
    CHECK(rel_diff(g_fused[i], inputs[i].grad()) < 1e-4);
  }
}

Tensor rnd64(const Shape& s) { return randn(s, kFloat64).requires_grad_(); }

}  // namespace

TEST_CASE("fused sdpa matches the composite: plain, Tq != Tk, T not a multiple of the tile") {
  manual_seed(11);
  check_against_composite({2, 3, 5, 8}, {2, 3, 5, 8}, {2, 3, 5, 8}, {});
  check_against_composite({2, 2, 70, 16}, {2, 2, 130, 16}, {2, 2, 130, 24}, {});
  check_against_composite({2, 2, 3, 33, 8}, {2, 2, 3, 100, 8}, {2, 2, 3, 100, 8}, {.scale = 0.3});
  check_against_composite({1, 129, 32}, {1, 65, 32}, {1, 65, 32}, {});
  check_against_composite({40, 8}, {64, 8}, {64, 5}, {});
}

TEST_CASE("fused sdpa matches the composite: causal across tiles") {
  manual_seed(12);
  check_against_composite({2, 3, 97, 16}, {2, 3, 97, 16}, {2, 3, 97, 16}, {.causal = true});
  check_against_composite({1, 2, 200, 8}, {1, 2, 200, 8}, {1, 2, 200, 8}, {.causal = true, .scale = 0.5});
}

TEST_CASE("fused sdpa matches the composite: boolean and additive masks that broadcast") {
  manual_seed(13);
  Tensor keep = rand({70, 90}) > 0.3;  // every row keeps some key with overwhelming probability
  keep.slice(1, 0, 1).fill_(true);
  check_against_composite({2, 3, 70, 8}, {2, 3, 90, 8}, {2, 3, 90, 8}, {.attn_mask = keep});
  Tensor pad = ones({2, 1, 1, 90}, kBool);
  pad.slice(0, 1, 2).slice(3, 60, 90).fill_(false);  // key padding: batch 1 has 60 keys
  check_against_composite({2, 3, 70, 8}, {2, 3, 90, 8}, {2, 3, 90, 8}, {.attn_mask = pad});
  check_against_composite({2, 3, 70, 8}, {2, 3, 90, 8}, {2, 3, 90, 8}, {.attn_mask = randn({3, 1, 90})});
  check_against_composite({2, 3, 70, 8}, {2, 3, 90, 8}, {2, 3, 90, 8}, {.attn_mask = randn({2, 3, 70, 90})});
}

TEST_CASE("fused sdpa matches the composite: T = 1, and T past the kernel's key and query chunks") {
  manual_seed(13);
  // One query and one key (causal or not), one query against many keys.
  check_against_composite({2, 3, 1, 8}, {2, 3, 1, 8}, {2, 3, 1, 8}, {});
  check_against_composite({2, 3, 1, 8}, {2, 3, 1, 8}, {2, 3, 1, 8}, {.causal = true});
  check_against_composite({1, 2, 1, 8}, {1, 2, 300, 8}, {1, 2, 300, 8}, {});
  // T = 1100: more than the forward's 512-key chunks (online softmax across them) and the
  // backward's 1024-query chunks, not a multiple of either block; with 2 heads (dK/dV and dQ in
  // separate passes) and with 16 (one task per head).
  check_against_composite({1, 2, 1100, 8}, {1, 2, 1100, 8}, {1, 2, 1100, 8}, {.causal = true});
  check_against_composite({2, 8, 1100, 4}, {2, 8, 1100, 4}, {2, 8, 1100, 4}, {.causal = true});
  check_against_composite({1, 2, 130, 8}, {1, 2, 1100, 8}, {1, 2, 1100, 8}, {});
  // Many heads, T not a multiple of the blocks, with an additive mask (its gradient too).
  check_against_composite({2, 8, 70, 8}, {2, 8, 70, 8}, {2, 8, 70, 8}, {.attn_mask = randn({70, 70})});
}

/// q, k, v of a [B, T, 3C] projection, as a GPT slices them: [B, H, T, D] views, rows 3C apart.
std::vector<Tensor> heads_of_projection(const Tensor& x, int64_t H) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2) / 3;
  std::vector<Tensor> out;
  for (const Tensor& part : x.split(C, 2)) out.push_back(part.reshape({B, T, H, C / H}).transpose(1, 2));
  return out;
}

TEST_CASE("fused sdpa reads heads sliced from one projection through their strides, no copies") {
  manual_seed(14);
  Tensor x = randn({2, 70, 3 * 24}).requires_grad_();
  std::vector<Tensor> h = heads_of_projection(x, 3);
  REQUIRE_FALSE(h[0].is_contiguous());
  bool grad_in_projection_layout = false;
  h[0].register_hook([&](const Tensor& g) {
    grad_in_projection_layout = g.transpose(1, 2).is_contiguous();  // [B, T, H, D], as PyTorch's
    return Tensor();
  });
  Tensor fused = F::scaled_dot_product_attention(h[0], h[1], h[2], {.causal = true});
  CHECK(fused.transpose(1, 2).is_contiguous());  // heads side by side again is a view
  std::vector<Tensor> h2 = heads_of_projection(x, 3);  // its own graph
  Tensor ref = F::scaled_dot_product_attention_composite(h2[0], h2[1], h2[2], {.causal = true});
  CHECK(rel_diff(fused, ref) < 1e-5);
  Tensor w = randn(fused.shape());
  (fused * w).sum().backward();
  CHECK(grad_in_projection_layout);
  Tensor g_fused = x.grad();
  x.set_grad(Tensor());
  (ref * w).sum().backward();
  CHECK(rel_diff(g_fused, x.grad()) < 1e-4);

  // The output is a view of its [B, T, H, D] buffer, and backward needs it (as PyTorch's): a
  // write into it is caught, not silently differentiated through.
  std::vector<Tensor> h3 = heads_of_projection(x, 3);
  Tensor y = F::scaled_dot_product_attention(h3[0], h3[1], h3[2], {.causal = true});
  y.mul_(2.0);
  CHECK_THROWS_WITH((y * w).sum().backward(), doctest::Contains("modified by an in-place operation"));

  // Layouts the kernels cannot read in place are copied first: keys expanded along T (stride 0)
  // and values with a transposed last dim.
  Tensor q = randn({2, 2, 9, 8}).requires_grad_(), k1 = randn({2, 2, 1, 8}).requires_grad_(),
         vt = randn({2, 2, 8, 9}).requires_grad_();
  auto run = [&](bool use_fused) {
    Tensor k = k1.expand({2, 2, 9, 8}), v = vt.transpose(2, 3);
    Tensor y = use_fused ? F::scaled_dot_product_attention(q, k, v, {})
                         : F::scaled_dot_product_attention_composite(q, k, v, {});
    (y * y).sum().backward();
    std::vector<Tensor> r = {y.detach(), q.grad(), k1.grad(), vt.grad()};
    for (Tensor t : {q, k1, vt}) t.set_grad(Tensor());
    return r;
  };
  const std::vector<Tensor> a = run(true), b = run(false);
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("tensor ", i);
    CHECK(rel_diff(a[i], b[i]) < 1e-4);
  }
}

TEST_CASE("fused sdpa gradcheck in f64 through heads sliced from one projection") {
  manual_seed(15);
  auto r = autograd::gradcheck(
      [](const std::vector<Tensor>& x) {
        std::vector<Tensor> h = heads_of_projection(x[0], 2);
        return F::scaled_dot_product_attention(h[0], h[1], h[2], {.causal = true});
      },
      {rnd64({2, 5, 3 * 6})});
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("fused sdpa dropout: the kept mask reproduces it from core ops, forward and backward") {
  manual_seed(31);
  Generator gen(99);
  const GeneratorState s0 = gen.state();
  Tensor q = randn({2, 2, 70, 8}).requires_grad_(), k = randn({2, 2, 75, 8}).requires_grad_(),
         v = randn({2, 2, 75, 8}).requires_grad_();
  Tensor fused = F::scaled_dot_product_attention(q, k, v, {.dropout_p = 0.3, .generator = &gen});
  CHECK(gen.state().offset == s0.offset + attention_dropout_counters(2 * 2 * 70 * 75));
  AttentionParams p;
  p.dropout_p = 0.3;
  p.seed = s0.seed;
  p.offset = s0.offset;
  Tensor keep = attention_dropout_keep_mask(p, 2, 2, 70, 75);
  const double kept = keep.to(kFloat32).mean().item<double>();
  CHECK(kept > 0.66);
  CHECK(kept < 0.74);
  Tensor probs = softmax(matmul(q, k.transpose(2, 3)) / std::sqrt(8.0), -1);
  Tensor ref = matmul(where(keep, probs / 0.7, Scalar(0.0)), v);
  CHECK(rel_diff(fused, ref) < 1e-5);
  Tensor w = randn(fused.shape());
  (fused * w).sum().backward();
  std::vector<Tensor> g = {q.grad(), k.grad(), v.grad()};
  for (Tensor t : {q, k, v}) t.set_grad(Tensor());
  (ref * w).sum().backward();
  CHECK(rel_diff(g[0], q.grad()) < 1e-4);
  CHECK(rel_diff(g[1], k.grad()) < 1e-4);
  CHECK(rel_diff(g[2], v.grad()) < 1e-4);
}

TEST_CASE("fused sdpa dropout gradcheck in f64 (the generator replayed on every call)") {
  manual_seed(32);
  Generator gen(5);
  const GeneratorState s0 = gen.state();
  auto r = autograd::gradcheck(
      [&](const std::vector<Tensor>& x) {
        gen.set_state(s0);
        return F::scaled_dot_product_attention(x[0], x[1], x[2], {.dropout_p = 0.4, .generator = &gen});
      },
      {rnd64({1, 2, 6, 3}), rnd64({1, 2, 6, 3}), rnd64({1, 2, 6, 3})});
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("fused sdpa: a query with no key to attend to gives 0 and no gradient (not NaN)") {
  Tensor keep = ones({3, 4}, kBool);
  keep.slice(0, 1, 2).fill_(false);
  Tensor q = randn({1, 3, 2}).requires_grad_(), k = randn({1, 4, 2}).requires_grad_(), v = randn({1, 4, 2});
  Tensor out = F::scaled_dot_product_attention(q, k, v, {.attn_mask = keep});
  CHECK(out.slice(1, 1, 2).abs().max().item<double>() == 0.0);
  CHECK(out.slice(1, 0, 1).abs().max().item<double>() > 0.0);
  out.sum().backward();
  CHECK(q.grad().slice(1, 1, 2).abs().max().item<double>() == 0.0);
  CHECK(!std::isnan(k.grad().sum().item<double>()));
}

TEST_CASE("fused sdpa without queries or without keys: the gradients no product reaches are zeros") {
  // The backward writes each gradient row with its first product instead of zeroing first; rows
  // that no product reaches must still come out 0. Dirty memory first, so stale values would show.
  for (int i = 0; i < 4; ++i) (randn({64, 64}) * 1e3).sum();
  Tensor q = randn({2, 3, 0, 8}).requires_grad_(), k = randn({2, 3, 5, 8}).requires_grad_(),
         v = randn({2, 3, 5, 8}).requires_grad_();
  F::scaled_dot_product_attention(q, k, v).sum().backward();
  CHECK(k.grad().abs().max().item<double>() == 0.0);
  CHECK(v.grad().abs().max().item<double>() == 0.0);
  Tensor q2 = randn({2, 3, 4, 8}).requires_grad_(), k2 = randn({2, 3, 0, 8}).requires_grad_(),
         v2 = randn({2, 3, 0, 8}).requires_grad_();
  Tensor out = F::scaled_dot_product_attention(q2, k2, v2);
  CHECK(out.abs().max().item<double>() == 0.0);
  (out * randn(out.shape())).sum().backward();
  CHECK(q2.grad().abs().max().item<double>() == 0.0);
}

TEST_CASE("fused sdpa runs bf16 and f16 inputs (f32 inside) close to f32") {
  manual_seed(41);
  Tensor q = randn({2, 2, 40, 16}), k = randn({2, 2, 40, 16}), v = randn({2, 2, 40, 16});
  Tensor ref = F::scaled_dot_product_attention(q, k, v, {.causal = true});
  for (DType dt : {kBFloat16, kFloat16}) {
    Tensor out = F::scaled_dot_product_attention(q.to(dt), k.to(dt), v.to(dt), {.causal = true});
    CHECK(out.dtype() == dt);
    CHECK(max_diff(out.to(kFloat32), ref) < 5e-2);
  }
}

TEST_CASE("fused sdpa keeps no [Tq, Tk] probabilities for backward") {
  manual_seed(42);
  const int64_t B = 2, H = 2, T = 512, D = 16;
  Tensor q = randn({B, H, T, D}).requires_grad_(), k = randn({B, H, T, D}).requires_grad_(),
         v = randn({B, H, T, D}).requires_grad_();
  const size_t probs_bytes = B * H * T * T * sizeof(float);
  auto peak_of = [&](auto&& fn) {
    CpuMemoryTracker tracker;
    Tensor out = fn();
    const size_t held = tracker.live_bytes();
    out.sum().backward();
    return std::make_pair(held, tracker.peak_bytes());
  };
  auto [fused_held, fused_peak] = peak_of([&] { return F::scaled_dot_product_attention(q, k, v, {.causal = true}); });
  auto [comp_held, comp_peak] =
      peak_of([&] { return F::scaled_dot_product_attention_composite(q, k, v, {.causal = true}); });
  CHECK(fused_held < probs_bytes / 4);  // output + lse: B*H*T*(D+1) floats
  CHECK(comp_held > probs_bytes);       // the composite saves probabilities (and scores)
  CHECK(fused_peak < comp_peak / 4);
}

TEST_CASE("fused sdpa gradients are bit-identical whatever the thread count (both backward schedules)") {
  manual_seed(43);
  Tensor q = randn({1, 2, 150, 16}).requires_grad_(), k = randn({1, 2, 150, 16}).requires_grad_(),
         v = randn({1, 2, 150, 16}).requires_grad_(), add = randn({150, 150}).requires_grad_();
  auto grads = [&](int threads, bool causal) {
    const int before = get_num_threads();
    set_num_threads(threads);
    F::AttentionOptions o;
    if (causal) o.causal = true;
    else o.attn_mask = add;
    F::scaled_dot_product_attention(q, k, v, o).square().sum().backward();
    set_num_threads(before);
    std::vector<Tensor> g = {q.grad(), k.grad(), v.grad()};
    if (!causal) g.push_back(add.grad());
    for (Tensor t : {q, k, v, add}) t.set_grad(Tensor());
    return g;
  };
  for (bool causal : {true, false}) {
    auto one = grads(1, causal), three = grads(3, causal), four = grads(4, causal);  // 2 heads: two passes
    for (size_t i = 0; i < one.size(); ++i) {
      CHECK(max_diff(one[i], three[i]) == 0.0);
      CHECK(max_diff(one[i], four[i]) == 0.0);
    }
  }
  // 16 heads: one task per head.
  Tensor q16 = randn({2, 8, 90, 8}).requires_grad_(), k16 = randn({2, 8, 90, 8}).requires_grad_(),
         v16 = randn({2, 8, 90, 8}).requires_grad_();
  auto grads16 = [&](int threads) {
    const int before = get_num_threads();
    set_num_threads(threads);
    F::scaled_dot_product_attention(q16, k16, v16, {.causal = true}).square().sum().backward();
    set_num_threads(before);
    std::vector<Tensor> g = {q16.grad(), k16.grad(), v16.grad()};
    for (Tensor t : {q16, k16, v16}) t.set_grad(Tensor());
    return g;
  };
  auto one = grads16(1), three = grads16(3);
  for (size_t i = 0; i < one.size(); ++i) CHECK(max_diff(one[i], three[i]) == 0.0);
}

TEST_CASE("fused sdpa: bad arguments name the op and the values") {
  Tensor q = randn({2, 2, 4, 8});
  CHECK_THROWS_WITH(F::scaled_dot_product_attention(q, q, q, {.attn_mask = ones({3, 4}, kBool)}),
                    doctest::Contains("attn_mask shape [3, 4] does not broadcast to [2, 2, 4, 4]"));
  CHECK_THROWS_WITH(F::scaled_dot_product_attention(q, q.to(kFloat64), q),
                    doctest::Contains("must share one floating dtype"));
  CHECK_THROWS_WITH(F::scaled_dot_product_attention(q, randn({2, 3, 4, 8}), randn({2, 3, 4, 8})),
                    doctest::Contains("same leading (batch, head) dims"));
  CHECK_THROWS_WITH(F::scaled_dot_product_attention(q, q, q, {.attn_mask = ones({4, 4}, kInt64)}),
                    doctest::Contains("attn_mask must be bool or floating, got"));
  Tensor qi = ones({1, 4, 8}, kInt64);
  CHECK_THROWS_WITH(F::scaled_dot_product_attention(qi, qi, qi), doctest::Contains("scaled_dot_product_attention"));
}
