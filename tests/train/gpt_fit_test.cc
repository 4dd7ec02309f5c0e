// The GPT recipe on train::Trainer (train/gpt_fit.h) against the GPT's own loop as it was before
// (written out below): the same seed gives the same step losses and weights bit for bit, with
// dropout, two accumulated micro-batches, clipping, AdamW's two groups and the warm-up/cosine
// schedule; the data set's windows are the batches the GPT draws; Schedule::warmup_cosine is
// lr_at; a checkpoint that records only its step (the pipelined and sharded trainers') resumes
// at the batch that step implies.
#include <doctest/doctest.h>

#include <sstream>

#include "core/ops.h"
#include "data/text_corpus.h"
#include "data/token_windows.h"
#include "optim/clip.h"
#include "tests/file_util.h"
#include "tests/train/gpt_test_config.h"
#include "train/checkpoint.h"
#include "train/fit_parts.h"
#include "train/gpt_fit.h"

using namespace kiln;
using namespace kiln::models::gpt;
using namespace kiln::train::gpt;
using namespace kiln::data::text;

namespace {

/// 6 steps of 2 accumulated micro-batches of 4 x 32 tokens, dropout 0.1, clipping at 0.5 (it acts),
/// validation every 3 steps.
TrainConfig config(const std::string& dir) {
  TrainConfig c = test::tiny_gpt_config(dir);
  c.total_batch_tokens = 2 * 4 * 32;
  c.max_steps = 6;
  c.eval_every = 3;
  c.grad_clip = 0.5;
  c.sample_tokens = 0;
  return c;
}

/// The GPT's one-process loop before it ran on train::Trainer (train/gpt_trainer.cc at c01168e,
/// --amp none): the reference the recipe must reproduce. Returns every step's loss; `model` is
/// the model it trained.
std::vector<double> own_loop(const TrainConfig& c, std::shared_ptr<GPT>& model) {
  const int64_t t = c.gpt.block_size;
  const Splits data = split_corpus(read_corpus(c.data), t + 1);
  const std::vector<int64_t> ids = byte_token_ids(false);
  const int64_t accum = c.total_batch_tokens / (c.batch_size * t);
  manual_seed(c.seed);
  model = std::make_shared<GPT>(c.gpt);
  auto opt = make_optimizer(c, model->named_parameters());
  std::vector<double> losses;
  for (int64_t step = 0; step < c.max_steps; ++step) {
    opt->zero_grad();
    double loss_sum = 0;
    for (int64_t micro = 0; micro < accum; ++micro) {
      const auto row = static_cast<uint64_t>((step * accum + micro) * c.batch_size);
      Batch b = random_batch(data.train, ids, c.batch_size, t, c.seed, row);
      Tensor loss = GPT::loss(model->forward(b.x), b.y) / static_cast<double>(accum);
      loss.backward();
      loss_sum += loss.item<double>();
    }
    optim::clip_grad_norm_(model->parameters(), c.grad_clip);
    opt->set_lr(lr_at(c, step));
    opt->step();
    losses.push_back(loss_sum);
  }
  return losses;
}

}  // namespace

TEST_CASE("the recipe on the Trainer gives the GPT's own loop's losses and weights, bit for bit") {
  const std::string dir = test::scratch_dir("gpt_fit_equal");
  TrainConfig c = config(dir);
  c.save = dir + "/fit.safetensors";
  std::ostringstream log;
  TrainResult r = kiln::train::gpt::train(c, log);
  std::shared_ptr<GPT> reference;
  const std::vector<double> want = own_loop(c, reference);
  INFO(log.str());
  CHECK(r.grad_accum == 2);
  CHECK(r.step_losses == want);
  GPT trained(c.gpt);
  train::load_checkpoint(c.save, trained, nullptr, nullptr);
  auto a = trained.parameters(), b = reference->parameters();
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) CHECK(test::identical(a[i], b[i]));
  // The GPT's report: progress lines with the clipped norm, validation at steps 3 and 6.
  REQUIRE(r.val_losses.size() == 2);
  CHECK(r.val_losses[1].first == 6);
  CHECK(test::contains(log.str(), "step 6/6 | loss "));
  CHECK(test::contains(log.str(), "| norm "));
  CHECK(test::contains(log.str(), "step 3 | val loss "));
}

TEST_CASE("the recipe's options: AdamW's two groups as the GPT's, betas, warm-up then cosine to min_lr") {
  const std::string dir = test::scratch_dir("gpt_fit_options");
  TrainConfig c = config(dir);
  c.warmup_steps = 2, c.lr = 1e-3, c.min_lr = 1e-4, c.max_steps = 10;
  std::ostringstream log;
  const train::FitOptions o = fit_options(c, 1, nullptr, log);
  CHECK(o.schedule == train::Schedule::warmup_cosine);
  for (int64_t step = 0; step <= 11; ++step) CHECK(train::scheduled_lr(o, step, c.max_steps) == lr_at(c, step));
  CHECK(train::scheduled_lr(o, 0, 10) == doctest::Approx(5e-4));  // warm-up: lr x 1/2
  CHECK(train::scheduled_lr(o, 10, 10) == 1e-4);

  manual_seed(1);
  auto model = std::make_shared<GPT>(c.gpt);
  const auto want = param_groups(c, model->named_parameters());
  train::Trainer trainer(model, o);
  const auto& got = trainer.optimizer().param_groups();
  REQUIRE(got.size() == 2);
  for (size_t g = 0; g < 2; ++g) {
    REQUIRE(got[g].params.size() == want[g].params.size());
    for (size_t i = 0; i < got[g].params.size(); ++i)
      CHECK(got[g].params[i].data_ptr<float>() == want[g].params[i].data_ptr<float>());
    CHECK(got[g].get("weight_decay") == want[g].get("weight_decay"));
    CHECK(got[g].get("beta2") == 0.95);
  }
  CHECK(want[0].params.size() == 2 * 4);  // per block: attention qkv and proj, MLP fc and proj

  train::FitOptions bad = o;
  bad.min_lr = 2e-3;
  CHECK(test::contains(test::error_of([&] { train::Trainer t(std::make_shared<GPT>(c.gpt), bad); }),
                       "min_lr must be finite and in [0, lr = 0.001], got 0.002"));
  bad = o;
  bad.warmup_steps = -1;
  CHECK(test::contains(test::error_of([&] { train::Trainer t(std::make_shared<GPT>(c.gpt), bad); }),
                       "warmup_steps must be >= 0, got -1"));
}

TEST_CASE("TokenWindows yields the GPT's batches: random rows by (seed, row), sequential tiles") {
  auto bytes = std::make_shared<std::vector<uint8_t>>(1000);
  for (size_t i = 0; i < bytes->size(); ++i) (*bytes)[i] = static_cast<uint8_t>(i * 7 % 251);
  const auto ids = byte_token_ids(true);
  TokenWindows random(bytes, ids, 16, 40, WindowOrder::random, 7);
  for (int64_t k = 0; k < 10; ++k) {
    std::vector<int64_t> rows{4 * k, 4 * k + 1, 4 * k + 2, 4 * k + 3};
    data::Example got = random.get_batch(rows);
    Batch want = random_batch(*bytes, ids, 4, 16, 7, static_cast<uint64_t>(4 * k));
    CHECK(test::identical(got.data, want.x));
    CHECK(test::identical(got.target, want.y));
  }
  TokenWindows tiles(bytes, ids, 16, 8, WindowOrder::sequential);
  data::Example got = tiles.get_batch({4, 5, 6, 7});
  CHECK(test::identical(got.data, sequential_batch(*bytes, ids, 4, 16, 1).x));
  CHECK(tiles.get(3).data.dim() == 1);
  CHECK(test::identical(tiles.get(3).target, sequential_batch(*bytes, ids, 1, 16, 3).y.squeeze(0)));
  CHECK(test::contains(test::error_of([&] { TokenWindows(bytes, ids, 16, 100, WindowOrder::sequential); }),
                       "holds 62 sequential windows of 16, not 100"));
  CHECK(test::contains(test::error_of([&] { TokenWindows(bytes, ids, 1000, 1, WindowOrder::random); }),
                       "a stream of 1000 tokens holds no window of 1000 + 1"));
  CHECK(test::contains(test::error_of([&] { random.get(40); }), "TokenWindows(random): index 40 is out of range"));
}

TEST_CASE("a checkpoint that records only its step (as the pipelined and sharded trainers write) resumes exactly") {
  const std::string dir = test::scratch_dir("gpt_fit_step_only");
  std::ostringstream log;
  const TrainResult whole = kiln::train::gpt::train(config(dir), log);
  TrainConfig first = config(dir);
  first.save = dir + "/part.safetensors";
  first.stop_after_steps = 2;
  const TrainResult a = kiln::train::gpt::train(first, log);
  REQUIRE(a.steps_done == 2);
  {  // the same checkpoint with the Trainer's position dropped: step 2 at (epoch 0, batch 0)
    GPT model(first.gpt);
    auto opt = make_optimizer(first, model.named_parameters());
    train::TrainingState state = train::load_checkpoint(first.save, model, opt.get(), nullptr);
    CHECK(state.batch == 4);  // 2 steps of 2 micro-batches
    state.epoch = 0, state.batch = 0;
    train::save_checkpoint(first.save, model, opt.get(), state);
  }
  TrainConfig second = config(dir);
  second.resume = first.save;
  const TrainResult b = kiln::train::gpt::train(second, log);
  std::vector<double> joined = a.step_losses;
  joined.insert(joined.end(), b.step_losses.begin(), b.step_losses.end());
  CHECK(joined == whole.step_losses);
  CHECK(test::contains(log.str(), "resumed from " + first.save + " at step 2"));
}
