// A profiled GPT training step (forward, backward, AdamW) puts its kernel time in the three
// classes of KeyAverages::kernel_classes(): every linear layer's GEMMs (forward and both backward
// products) in "GEMM", the fused attention's forward and backward in "attention", the rest in
// "memory-bound"; the class table that `--profile` prints names all three.
#include <doctest/doctest.h>

#include <string>

#include "models/gpt_model.h"
#include "optim/adam.h"
#include "profiler/key_averages.h"
#include "profiler/profiler.h"

using namespace kiln;

TEST_CASE("a GPT step's kernels: GEMM, attention and memory-bound time apart, GEMM FLOPs all counted") {
  manual_seed(3);
  models::gpt::GPTConfig c;
  c.block_size = 32;
  c.vocab_size = 64;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 32;
  models::gpt::GPT model(c);
  optim::AdamW opt(model.parameters(), optim::AdamOptions(1e-3));
  const int64_t B = 2, T = 32;
  Tensor idx = randint(0, c.vocab_size, {B, T}), targets = randint(0, c.vocab_size, {B, T});

  profiler::Profiler prof;
  prof.start();
  opt.zero_grad();
  models::gpt::GPT::loss(model.forward(idx), targets).backward();
  opt.step();
  prof.stop();

  const profiler::KeyAverages avg = prof.key_averages();
  const std::vector<profiler::KernelClass> k = avg.kernel_classes();
  REQUIRE(k.size() == 3);
  CHECK(k[0].name == "GEMM");
  CHECK(k[1].name == "attention");
  CHECK(k[2].name == "memory-bound");
  // Per layer: qkv, attention projection, MLP up and down; then the tied head. Forward and the two
  // backward products (grad of the input and of the weight) are 3 x 2 x tokens x in x out each.
  const double C = static_cast<double>(c.n_embd), tokens = static_cast<double>(B * T);
  const double per_layer = C * 3 * C + C * C + C * 4 * C + 4 * C * C;
  const double gemm_flops = 6 * tokens * (c.n_layer * per_layer + C * static_cast<double>(c.vocab_size));
  CHECK(k[0].flops == doctest::Approx(gemm_flops).epsilon(1e-9));
  CHECK(k[0].calls >= 3 * (4 * c.n_layer + 1) / 2);  // some backward GEMMs may share a call
  // One fused attention forward and one backward per layer, and their FLOPs (causal or not, the
  // profiler counts the full product: 2 B H T T (D + Dv) forward, twice that backward).
  CHECK(k[1].calls == 2 * c.n_layer);
  CHECK(k[1].flops > 0);
  CHECK(k[2].calls > k[1].calls);  // layer norms, GELU, softmax cross-entropy, AdamW, ...
  CHECK(k[0].self_ns > 0);
  CHECK(k[1].self_ns > 0);
  CHECK(k[2].self_ns > 0);
  const std::string t = avg.kernel_class_table();
  for (const char* name : {"GEMM", "attention", "memory-bound"}) CHECK(t.find(name) != std::string::npos);
}
