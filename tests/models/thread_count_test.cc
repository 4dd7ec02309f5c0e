// Training gives bit-identical losses and weights at any thread count: a few steps of the MLP and
// the CNN of the main job and of a small GPT (attention, layer norm, AdamW, gradient clipping) at
// 1, 2, 3 and 4 threads. Every kernel's split of the work may follow the thread count, but not the
// order in which it sums (docs/determinism.md).
#include <doctest/doctest.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "models/gpt_model.h"
#include "models/mlp_cnn.h"
#include "nn/functional.h"
#include "optim/adam.h"
#include "optim/clip.h"
#include "optim/sgd.h"

using namespace kiln;

namespace {

/// The losses of every step, then every weight after the last step, as raw bits.
struct Run {
  std::vector<double> losses;
  std::vector<std::vector<uint8_t>> weights;
  std::vector<std::string> names;
};

std::vector<uint8_t> bytes_of(const Tensor& t) {
  Tensor c = t.contiguous();
  std::vector<uint8_t> b(static_cast<size_t>(c.numel() * c.element_size()));
  std::memcpy(b.data(), c.data_ptr(), b.size());
  return b;
}

void keep_weights(Run& r, const nn::Module& m) {
  for (const auto& [name, p] : m.named_parameters()) {
    r.names.push_back(name);
    r.weights.push_back(bytes_of(p));
  }
}

/// Runs `make_and_train` (which returns the losses and the model's parameters) at `threads`.
Run at_threads(int threads, const std::function<Run()>& make_and_train) {
  const int saved = get_num_threads();
  set_num_threads(threads);
  Run r = make_and_train();
  set_num_threads(saved);
  return r;
}

/// An image classifier: `steps` of SGD with momentum on random images and labels.
Run train_classifier(const std::shared_ptr<nn::Sequential>& model, int64_t batch, int steps) {
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.05).set_momentum(0.9));
  Run r;
  for (int s = 0; s < steps; ++s) {
    Tensor x = randn({batch, 1, 28, 28});
    Tensor y = randint(0, 10, {batch});
    opt.zero_grad();
    Tensor loss = nn::functional::cross_entropy(model->forward(x), y);
    loss.backward();
    opt.step();
    r.losses.push_back(loss.item<double>());
  }
  keep_weights(r, *model);
  return r;
}

void check_same(const Run& a, const Run& b, int threads) {
  INFO("threads " << threads);
  REQUIRE(a.losses.size() == b.losses.size());
  for (size_t i = 0; i < a.losses.size(); ++i) {
    INFO("step " << i);
    CHECK(a.losses[i] == b.losses[i]);
  }
  REQUIRE(a.weights.size() == b.weights.size());
  for (size_t i = 0; i < a.weights.size(); ++i) {
    INFO("parameter " << a.names[i]);
    CHECK(a.weights[i] == b.weights[i]);
  }
}

void check_all_thread_counts(const std::function<Run()>& make_and_train) {
  const Run one = at_threads(1, make_and_train);
  CHECK(one.losses.front() != one.losses.back());  // it trained
  for (int t : {2, 3, 4}) check_same(one, at_threads(t, make_and_train), t);
}

}  // namespace

TEST_CASE("MLP training: the same losses and weights at 1, 2, 3 and 4 threads") {
  check_all_thread_counts([] {
    manual_seed(5);
    return train_classifier(models::make_mlp(), 128, 4);
  });
}

TEST_CASE("CNN training: the same losses and weights at 1, 2, 3 and 4 threads") {
  check_all_thread_counts([] {
    manual_seed(6);
    return train_classifier(models::make_cnn(), 32, 3);
  });
}

TEST_CASE("GPT training (attention, layer norm, AdamW, clipping): the same at 1, 2, 3 and 4 threads") {
  // B * H = 6 heads: more than 2 and 3 threads, fewer than 4 for attention's other backward split;
  // T = 80 is not a multiple of the attention kernel's blocks.
  check_all_thread_counts([] {
    manual_seed(7);
    models::gpt::GPTConfig c;
    c.block_size = 96;
    c.vocab_size = 101;
    c.n_layer = 2;
    c.n_head = 2;
    c.n_embd = 64;
    models::gpt::GPT model(c);
    optim::AdamW opt(model.parameters(), optim::AdamOptions(1e-3));
    Run r;
    for (int s = 0; s < 3; ++s) {
      Tensor idx = randint(0, c.vocab_size, {3, 80});
      Tensor targets = randint(0, c.vocab_size, {3, 80});
      opt.zero_grad();
      Tensor loss = models::gpt::GPT::loss(model.forward(idx), targets);
      loss.backward();
      optim::clip_grad_norm_(model.parameters(), 0.5);
      opt.step();
      r.losses.push_back(loss.item<double>());
    }
    keep_weights(r, model);
    return r;
  });
}
