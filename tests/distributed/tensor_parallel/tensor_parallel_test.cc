// Tensor parallelism on 2 and 4 real processes (Gloo on 127.0.0.1): every mapping's forward and
// backward, and a transformer's pieces split over the group — an MLP (column- then row-parallel),
// attention with its heads split, a vocabulary-parallel embedding and cross-entropy — give the
// outputs and gradients of the same layers run whole in one process (each rank computes that
// reference itself from the same seed), and a few SGD steps of a small TP model follow the
// one-process losses.
#include <doctest/doctest.h>

#include <cmath>

#include "autograd/autograd.h"
#include "core/generator.h"
#include "core/ops.h"
#include "distributed/backend/init.h"
#include "distributed/tensor_parallel/layers.h"
#include "nn/attention.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "tests/distributed/multiprocess.h"
#include "tests/testing/compare.h"

namespace kiln {
namespace {

using test::expect;
namespace F = nn::functional;
namespace tp = dist::tp;

void expect_close(const Tensor& got, const Tensor& want, double tol, const char* what) {
  expect(got.sizes() == want.sizes(), "{}: shapes {} and {} differ", what, got.sizes(), want.sizes());
  const double d = test::max_diff(got, want);
  expect(d <= tol, "{}: differs from one process by {} (tolerance {})", what, d, tol);
}

/// Rank r's 1/T slice of `full` along `dim`.
Tensor slice_of(const Tensor& full, int rank, int world, int64_t dim) {
  const int64_t part = full.size(dim) / world;
  return full.narrow(dim, rank * part, part);
}

void mappings(int rank, int world) {
  auto pg = dist::init_process_group();
  Generator g(7);
  // The same whole tensor on every rank; each rank also draws its own.
  Tensor whole = randn({4, 2 * world, 3}, {}, &g);
  Tensor mine = randn({4, 2, 3}, {}, &g) + Scalar(static_cast<double>(rank));
  Tensor up = randn({4, 2 * world, 3}, {}, &g);  // an upstream gradient, the same on every rank

  // copy_to_group: identity forward; backward sums the ranks' gradients.
  Tensor x = mine.detach().requires_grad_();
  Tensor y = tp::copy_to_group(x, pg);
  expect_close(y, mine, 0, "copy_to_group forward");
  (y * Scalar(static_cast<double>(rank + 1))).sum().backward();
  expect_close(x.grad(), full_like(mine, world * (world + 1) / 2.0), 1e-6, "copy_to_group backward");

  // reduce_from_group: sum forward, identity backward.
  x = mine.detach().requires_grad_();
  y = tp::reduce_from_group(x, pg);
  Tensor want = zeros_like(mine);
  for (int r = 0; r < world; ++r) {
    Generator gr(7);
    randn({4, 2 * world, 3}, {}, &gr);
    want = want + randn({4, 2, 3}, {}, &gr) + Scalar(static_cast<double>(r));
  }
  expect_close(y, want, 1e-5, "reduce_from_group forward");
  y.backward(up.narrow(1, 0, 2).contiguous());
  expect_close(x.grad(), up.narrow(1, 0, 2), 0, "reduce_from_group backward");

  // scatter_to_group / gather_from_group along dim 1 (and -2) are each other's conjugates.
  x = whole.detach().requires_grad_();
  y = tp::scatter_to_group(x, pg, 1);
  expect_close(y, slice_of(whole, rank, world, 1), 0, "scatter_to_group forward");
  Tensor back = tp::gather_from_group(y, pg, -2);
  expect_close(back, whole, 0, "gather_from_group forward");
  back.backward(up);
  expect_close(x.grad(), up, 1e-6, "scatter(gather) backward");

  // Sequence parallel: reduce-scatter along dim 1 forward, all-gather backward; and the reverse.
  x = whole.detach().requires_grad_();
  y = tp::reduce_scatter_to_group(x * Scalar(static_cast<double>(rank + 1)), pg, 1);
  expect_close(y, slice_of(whole, rank, world, 1) * Scalar(world * (world + 1) / 2.0), 1e-5,
               "reduce_scatter_to_group forward");
  y.backward(slice_of(up, rank, world, 1).contiguous());
  expect_close(x.grad(), up * Scalar(static_cast<double>(rank + 1)), 1e-6, "reduce_scatter_to_group backward");
  x = slice_of(whole, rank, world, 1).contiguous().requires_grad_();
  y = tp::gather_from_sequence(x, pg, 1);
  expect_close(y, whole, 0, "gather_from_sequence forward");
  y.backward(up);
  expect_close(x.grad(), slice_of(up, rank, world, 1) * Scalar(static_cast<double>(world)), 1e-5,
               "gather_from_sequence backward");

  // A size that does not divide names the op, the dim and the group size.
  bool threw = false;
  try {
    tp::scatter_to_group(randn({3, 2 * world + 1}), pg, 1);
  } catch (const Error& e) {
    threw = std::string(e.what()).find("tp::scatter_to_group: dim 1 of size " + std::to_string(2 * world + 1)) !=
            std::string::npos;
  }
  expect(threw, "an indivisible scatter did not throw the expected message");
}

TEST_CASE("tensor-parallel mappings: forward and conjugate backward on 2 and 4 ranks") {
  test::require_all_ok(test::run_ranks(2, mappings, 120, "tp_mappings2"));
  test::require_all_ok(test::run_ranks(4, mappings, 120, "tp_mappings4"));
}

/// The MLP c_proj(gelu(c_fc(x))) whole and split; outputs and every gradient agree.
void mlp(int rank, int world) {
  auto pg = dist::init_process_group();
  manual_seed(3);
  nn::Linear fc(16, 64), proj(64, 16);
  Generator g(5);
  Tensor x0 = randn({2, 5, 16}, {}, &g), up = randn({2, 5, 16}, {}, &g);

  Tensor xa = x0.detach().requires_grad_();
  Tensor ya = proj.forward(F::gelu(fc.forward(xa), "tanh"));
  ya.backward(up);

  tp::ColumnParallelLinear cfc(fc, pg);
  tp::RowParallelLinear rproj(proj, pg);
  expect(cfc.weight.sizes() == Shape{64 / world, 16} && rproj.weight.sizes() == Shape{16, 64 / world},
         "shard shapes {} and {}", cfc.weight.sizes(), rproj.weight.sizes());
  Tensor xb = x0.detach().requires_grad_();
  Tensor yb = rproj.forward(F::gelu(cfc.forward(xb), "tanh"));
  yb.backward(up);
  expect_close(yb, ya, 1e-5, "MLP output");
  expect_close(xb.grad(), xa.grad(), 1e-5, "MLP input gradient");
  expect_close(cfc.weight.grad(), slice_of(fc.weight.grad(), rank, world, 0), 1e-5, "c_fc weight gradient");
  expect_close(cfc.bias.grad(), slice_of(fc.bias.grad(), rank, world, 0), 1e-5, "c_fc bias gradient");
  expect_close(rproj.weight.grad(), slice_of(proj.weight.grad(), rank, world, 1), 1e-5, "c_proj weight gradient");
  expect_close(rproj.bias.grad(), proj.bias.grad(), 1e-5, "c_proj bias gradient");

  // gather_output gives the whole layer's output on every rank.
  tp::ColumnParallelLinear gathered(fc, pg, /*gather_output=*/true);
  expect_close(gathered.forward(x0), fc.forward(x0), 1e-5, "gathered column-parallel output");
  // A row-parallel layer fed the whole input slices it itself.
  tp::RowParallelLinear whole_in(proj, pg, /*input_is_parallel=*/false);
  Tensor h = F::gelu(fc.forward(x0), "tanh");
  expect_close(whole_in.forward(h), proj.forward(h), 1e-5, "row-parallel output from the whole input");
}

TEST_CASE("column- then row-parallel MLP equals the one-process MLP on 2 and 4 ranks") {
  test::require_all_ok(test::run_ranks(2, mlp, 120, "tp_mlp2"));
  test::require_all_ok(test::run_ranks(4, mlp, 120, "tp_mlp4"));
}

/// Causal self-attention with q, k, v in one [3C, C] projection, heads split over the group.
Tensor attention(nn::Module& c_attn, nn::Module& c_proj, const Tensor& x, int64_t heads) {
  const int64_t b = x.size(0), t = x.size(1), hd = 8;
  std::vector<Tensor> qkv = c_attn.forward(x).split(heads * hd, 2);
  auto split_heads = [&](const Tensor& m) { return m.reshape({b, t, heads, hd}).transpose(1, 2); };
  Tensor y = nn::functional::scaled_dot_product_attention(split_heads(qkv[0]), split_heads(qkv[1]),
                                                          split_heads(qkv[2]), {.causal = true});
  return c_proj.forward(y.transpose(1, 2).reshape({b, t, heads * hd}));
}

void attention_heads(int rank, int world) {
  auto pg = dist::init_process_group();
  const int64_t heads = 4, c = heads * 8;
  manual_seed(9);
  nn::Linear qkv(c, 3 * c), proj(c, c);
  Generator g(4);
  Tensor x0 = randn({2, 6, c}, {}, &g), up = randn({2, 6, c}, {}, &g);
  Tensor xa = x0.detach().requires_grad_();
  Tensor ya = attention(qkv, proj, xa, heads);
  ya.backward(up);

  tp::ColumnParallelLinear tqkv(qkv, pg, false, /*parts=*/3);
  tp::RowParallelLinear tproj(proj, pg);
  Tensor xb = x0.detach().requires_grad_();
  Tensor yb = attention(tqkv, tproj, xb, heads / world);
  yb.backward(up);
  expect_close(yb, ya, 1e-5, "attention output");
  expect_close(xb.grad(), xa.grad(), 1e-5, "attention input gradient");
  // This rank's rows of each of q, k and v.
  std::vector<Tensor> parts;
  for (const Tensor& p : qkv.weight.grad().chunk(3, 0)) parts.push_back(slice_of(p, rank, world, 0));
  expect_close(tqkv.weight.grad(), cat(parts, 0), 1e-5, "c_attn weight gradient (rows of q, k, v)");
  expect_close(tproj.weight.grad(), slice_of(proj.weight.grad(), rank, world, 1), 1e-5, "c_proj weight gradient");

  bool threw = false;
  try {
    nn::Linear odd(c, 3 * (c + world + 1));
    tp::ColumnParallelLinear bad(odd, pg, false, 3);
  } catch (const Error& e) {
    threw = std::string(e.what()).find("does not divide by the tensor-parallel size " + std::to_string(world)) !=
            std::string::npos;
  }
  expect(threw, "an indivisible head split did not name the tensor-parallel size");
}

TEST_CASE("attention with its heads split over 2 and 4 ranks equals one process") {
  test::require_all_ok(test::run_ranks(2, attention_heads, 120, "tp_attn2"));
  test::require_all_ok(test::run_ranks(4, attention_heads, 120, "tp_attn4"));
}

/// Embedding -> lm_head (column-parallel, not gathered) -> cross-entropy, vocabulary split.
void vocabulary(int rank, int world) {
  auto pg = dist::init_process_group();
  const int64_t vocab = 12 * world, c = 8, n = 10;
  manual_seed(12);
  nn::Embedding emb(vocab, c);
  nn::Linear head(c, vocab, /*bias=*/false);
  Generator g(6);
  Tensor ids = randint(0, vocab, {n}, kInt64, &g), targets = randint(0, vocab, {n}, kInt64, &g);
  Tensor la = F::cross_entropy(head.forward(emb.forward(ids) * Scalar(3.0)), targets);
  la.backward();

  tp::VocabParallelEmbedding temb(emb, pg);
  tp::ColumnParallelLinear thead(head, pg);
  Tensor logits = thead.forward(temb.forward(ids) * Scalar(3.0));
  expect(logits.sizes() == Shape{n, vocab / world}, "local logits {}", logits.sizes());
  Tensor lb = tp::vocab_parallel_cross_entropy(logits, targets, pg);
  lb.backward();
  expect_close(lb, la, 1e-5, "vocabulary-parallel cross-entropy");
  expect_close(temb.weight.grad(), slice_of(emb.weight.grad(), rank, world, 0), 1e-5, "embedding rows' gradient");
  expect_close(thead.weight.grad(), slice_of(head.weight.grad(), rank, world, 0), 1e-5, "lm_head rows' gradient");

  bool threw = false;
  try {
    tp::vocab_parallel_cross_entropy(logits.detach(), full_like(targets, vocab), pg);
  } catch (const Error& e) {
    threw = std::string(e.what()).find("target " + std::to_string(vocab) + " is outside the vocabulary") !=
            std::string::npos;
  }
  expect(threw, "a target outside the vocabulary was not named");
}

TEST_CASE("vocabulary-parallel embedding and cross-entropy equal one process on 2 and 4 ranks") {
  test::require_all_ok(test::run_ranks(2, vocabulary, 120, "tp_vocab2"));
  test::require_all_ok(test::run_ranks(4, vocabulary, 120, "tp_vocab4"));
}

/// A small TP language model (embedding, one MLP block with a residual, lm_head) trained with
/// SGD for 5 steps follows the same model trained whole in this process.
void training(int rank, int world) {
  auto pg = dist::init_process_group();
  const int64_t vocab = 8 * world, c = 16;
  manual_seed(21);
  nn::Embedding emb(vocab, c);
  nn::Linear fc(c, 4 * c), proj(4 * c, c), head(c, vocab, false);
  tp::VocabParallelEmbedding temb(emb, pg);
  tp::ColumnParallelLinear tfc(fc, pg), thead(head, pg);
  tp::RowParallelLinear tproj(proj, pg);
  auto params = [](std::vector<nn::Module*> ms) {
    std::vector<Tensor> ps;
    for (nn::Module* m : ms)
      for (const Tensor& p : m->parameters()) ps.push_back(p);
    return ps;
  };
  optim::SGD whole(params({&emb, &fc, &proj, &head}), optim::SGDOptions(0.5));
  optim::SGD split(params({&temb, &tfc, &tproj, &thead}), optim::SGDOptions(0.5));
  for (int step = 0; step < 5; ++step) {
    Generator g(100 + static_cast<uint64_t>(step));
    Tensor ids = randint(0, vocab, {12}, kInt64, &g), targets = randint(0, vocab, {12}, kInt64, &g);
    Tensor h = emb.forward(ids);
    Tensor la = F::cross_entropy(head.forward(h + proj.forward(F::gelu(fc.forward(h), "tanh"))), targets);
    Tensor th = temb.forward(ids);
    Tensor lb = tp::vocab_parallel_cross_entropy(thead.forward(th + tproj.forward(F::gelu(tfc.forward(th), "tanh"))),
                                                 targets, pg);
    expect(std::abs(la.item<float>() - lb.item<float>()) <= 1e-5, "step {}: loss {} whole, {} split", step,
           la.item<float>(), lb.item<float>());
    la.backward();
    lb.backward();
    whole.step();
    split.step();
    whole.zero_grad();
    split.zero_grad();
  }
  expect_close(tfc.weight, slice_of(fc.weight, rank, world, 0), 1e-4, "c_fc after training");
  expect_close(temb.weight, slice_of(emb.weight, rank, world, 0), 1e-4, "embedding after training");
}

TEST_CASE("a small tensor-parallel model trains as one process does, on 2 and 4 ranks") {
  test::require_all_ok(test::run_ranks(2, training, 120, "tp_train2"));
  test::require_all_ok(test::run_ranks(4, training, 120, "tp_train4"));
}

}  // namespace
}  // namespace kiln
