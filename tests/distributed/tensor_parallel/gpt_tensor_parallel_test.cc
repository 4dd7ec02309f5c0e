// The GPT split over 2 and 4 real processes (TensorParallelGPT, Gloo on 127.0.0.1) against the
// same GPT whole in one process: this rank's logits are its vocabulary columns of the whole
// model's, the loss is the same, every parameter's gradient is its shard of the whole model's,
// and three AdamW steps follow the same losses; shard_of / whole_of cut and rebuild each
// parameter exactly. Layouts that cannot split name the numbers.
#include <doctest/doctest.h>

#include <cmath>
#include <map>

#include "core/generator.h"
#include "core/ops.h"
#include "distributed/backend/init.h"
#include "models/gpt_tensor_parallel.h"
#include "optim/optim.h"
#include "tests/distributed/multiprocess.h"
#include "tests/testing/compare.h"

namespace kiln {
namespace {

using test::expect;
using models::gpt::GPT;
using models::gpt::GPTConfig;
using models::gpt::TensorParallelGPT;

GPTConfig tiny() {
  GPTConfig c;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 32;
  c.block_size = 16;
  c.vocab_size = 64;
  c.dropout = 0.0;
  return c;
}

/// max |a - b| of tensors of one shape.
double max_diff(const Tensor& a, const Tensor& b) {
  expect(a.sizes() == b.sizes(), "shapes {} and {} differ", a.sizes(), b.sizes());
  return test::max_diff(a, b);
}

/// This rank's shard of the whole model's tensor `w` named `name` (a parameter or its gradient).
Tensor shard_of(const std::string& name, const Tensor& w, int rank, int world) {
  auto rows = [&](const Tensor& t, int64_t parts) {
    std::vector<Tensor> out;
    for (const Tensor& p : t.chunk(parts, 0)) out.push_back(p.narrow(0, rank * (p.size(0) / world), p.size(0) / world));
    return cat(out, 0);
  };
  if (name == "wte.weight" || name.ends_with("mlp.c_fc.weight") || name.ends_with("mlp.c_fc.bias")) return rows(w, 1);
  if (name.ends_with("attn.c_attn.weight") || name.ends_with("attn.c_attn.bias")) return rows(w, 3);
  if (name.ends_with("c_proj.weight")) return w.narrow(1, rank * (w.size(1) / world), w.size(1) / world);
  return w;  // replicated: position table, LayerNorms, c_proj biases
}

void gpt_matches(int rank, int world, bool sequence_parallel) {
  auto pg = dist::init_process_group();
  manual_seed(31);
  GPT whole(tiny());
  TensorParallelGPT split(whole, pg, sequence_parallel);
  // parameter_split says how each parameter was split: shard_of cuts the whole one to this rank's,
  // whole_of puts the ranks' shards back together, both exactly.
  std::map<std::string, Tensor> whole_params;
  for (auto& [name, p] : whole.named_parameters()) whole_params[name] = p.detach();
  for (auto& [name, p] : split.named_parameters()) {
    const Tensor& w = whole_params.at(name);
    expect(max_diff(models::gpt::shard_of(name, w, *pg), p.detach()) == 0, "{}: shard_of differs from the split", name);
    expect(max_diff(models::gpt::whole_of(name, p.detach(), *pg), w) == 0, "{}: whole_of differs from the whole", name);
  }
  Generator g(8);
  Tensor idx = randint(0, 64, {2, 12}, kInt64, &g), targets = randint(0, 64, {2, 12}, kInt64, &g);

  Tensor logits = whole.forward(idx), local = split.forward(idx);
  expect(local.sizes() == Shape{2, 12, 64 / world}, "local logits {}", local.sizes());
  const double dl = max_diff(local, logits.narrow(2, rank * (64 / world), 64 / world));
  expect(dl <= 1e-4, "logits differ from this rank's columns of the whole model's by {}", dl);
  Tensor la = GPT::loss(logits, targets), lb = split.loss(local, targets);
  expect(std::abs(la.item<float>() - lb.item<float>()) <= 1e-5, "loss {} whole, {} split", la.item<float>(),
         lb.item<float>());
  la.backward();
  lb.backward();
  std::map<std::string, Tensor> want;
  for (auto& [name, p] : whole.named_parameters()) want[name] = p.grad();
  int checked = 0;
  for (auto& [name, p] : split.named_parameters()) {
    expect(want.count(name) == 1, "the split model has a parameter {} the whole one lacks", name);
    const double d = max_diff(p.grad(), shard_of(name, want[name], rank, world));
    expect(d <= 1e-4, "{}: gradient differs from the whole model's shard by {}", name, d);
    ++checked;
  }
  expect(checked == static_cast<int>(want.size()), "{} of {} parameters compared", checked, want.size());

  optim::AdamW wa(whole.parameters(), optim::AdamOptions(3e-3)), wb(split.parameters(), optim::AdamOptions(3e-3));
  for (int step = 0; step < 3; ++step) {
    wa.step();
    wb.step();
    wa.zero_grad();
    wb.zero_grad();
    Generator gs(40 + static_cast<uint64_t>(step));
    Tensor i2 = randint(0, 64, {2, 12}, kInt64, &gs), t2 = randint(0, 64, {2, 12}, kInt64, &gs);
    Tensor a = GPT::loss(whole.forward(i2), t2), b = split.loss(split.forward(i2), t2);
    expect(std::abs(a.item<float>() - b.item<float>()) <= 1e-4, "after step {}: loss {} whole, {} split", step + 1,
           a.item<float>(), b.item<float>());
    a.backward();
    b.backward();
  }
}

TEST_CASE("TensorParallelGPT on 2 and 4 ranks: logits, loss, gradients and AdamW steps equal one process") {
  test::require_all_ok(test::run_ranks(2, [](int r, int w) { gpt_matches(r, w, false); }, 180, "tp_gpt2"));
  test::require_all_ok(test::run_ranks(4, [](int r, int w) { gpt_matches(r, w, false); }, 180, "tp_gpt4"));
}

TEST_CASE("TensorParallelGPT with sequence parallelism on 2 and 4 ranks equals one process too") {
  test::require_all_ok(test::run_ranks(2, [](int r, int w) { gpt_matches(r, w, true); }, 180, "tp_gpt_sp2"));
  test::require_all_ok(test::run_ranks(4, [](int r, int w) { gpt_matches(r, w, true); }, 180, "tp_gpt_sp4"));
}

TEST_CASE("GPT layouts that cannot split over the tensor-parallel size name the numbers") {
  GPTConfig c = tiny();
  c.n_head = 6;
  c.n_embd = 48;
  CHECK_THROWS_WITH(models::gpt::check_tensor_parallel(c, 4),
                    doctest::Contains("GPT tensor parallel: n_head 6 does not divide by the tensor-parallel size 4"));
  c = tiny();
  c.vocab_size = 65;
  CHECK_THROWS_WITH(models::gpt::check_tensor_parallel(c, 2),
                    doctest::Contains("GPT tensor parallel: vocab_size 65 does not divide by the tensor-parallel "
                                      "size 2 (pad the vocabulary, e.g. --vocab-size 66)"));
  CHECK_NOTHROW(models::gpt::check_tensor_parallel(tiny(), 4));
}

}  // namespace
}  // namespace kiln
