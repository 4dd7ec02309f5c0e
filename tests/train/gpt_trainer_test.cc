// The GPT trainer on a small text file: the loss falls, a run stopped and resumed from its
// checkpoint gives bit-identical losses to the uninterrupted run, gradient accumulation over two
// micro-batches matches one batch of twice the size, and bad input is refused by name.
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <sstream>

#include "core/ops.h"
#include "data/text_corpus.h"
#include "train/gpt_trainer.h"
#include "tests/train/gpt_test_config.h"
#include "tests/file_util.h"

using namespace kiln;
using namespace kiln::models::gpt;
using namespace kiln::train::gpt;
using namespace kiln::data::text;

namespace {

TrainConfig config(const std::string& dir) { return test::tiny_gpt_config(dir); }

}  // namespace

TEST_CASE("the loss falls, validation is reported, a sample and a JSON line come out") {
  std::string dir = test::scratch_dir("gpt_trainer_basic");
  TrainConfig c = config(dir);
  c.max_steps = 30;
  c.eval_every = 10;
  std::ostringstream log;
  TrainResult r = kiln::train::gpt::train(c, log);
  REQUIRE(r.step_losses.size() == 30);
  CHECK(r.step_losses.back() < r.step_losses.front() - 1.0);
  REQUIRE(r.val_losses.size() == 3);
  CHECK(r.val_losses.back().second < r.val_losses.front().second);
  CHECK(r.sample.size() == c.prompt.size() + 16);
  CHECK(test::contains(log.str(), "bits per byte"));
  CHECK(test::contains(log.str(), "tok/s | mfu"));
  auto j = nlohmann::json::parse(result_json(c, r));
  CHECK(j["steps"] == 30);
  CHECK(j["val_bpb"].get<double>() == doctest::Approx(r.val_losses.back().second / std::log(2.0)));
  CHECK(j["mfu"].get<double>() > 0);
}

TEST_CASE("a run stopped and resumed equals the uninterrupted run, bit for bit") {
  std::string dir = test::scratch_dir("gpt_trainer_resume");
  std::ostringstream log;
  TrainConfig whole = config(dir);
  TrainResult full = kiln::train::gpt::train(whole, log);

  TrainConfig first = config(dir);
  first.save = dir + "/run.safetensors";
  first.stop_after_steps = 3;
  TrainResult a = kiln::train::gpt::train(first, log);
  CHECK(a.steps_done == 3);
  TrainConfig second = config(dir);
  second.save = first.save;
  second.resume = first.save;
  TrainResult b = kiln::train::gpt::train(second, log);
  CHECK(b.steps_done == 8);
  std::vector<double> joined = a.step_losses;
  joined.insert(joined.end(), b.step_losses.begin(), b.step_losses.end());
  CHECK(joined == full.step_losses);
  REQUIRE(!b.val_losses.empty());
  CHECK(b.val_losses.back().second == full.val_losses.back().second);
  CHECK(b.sample == full.sample);

  TrainConfig other = config(dir);
  other.resume = first.save;
  other.seed = 7;  // other data positions: not the same run
  CHECK(test::contains(test::error_of([&] { kiln::train::gpt::train(other, log); }), "differs from this one"));
  other = config(dir);
  other.resume = first.save;
  other.gpt.n_embd = 64;
  const std::string msg = test::error_of([&] { kiln::train::gpt::train(other, log); });
  INFO(msg);
  CHECK(test::contains(msg, "does not match GPT: mismatched"));
  CHECK(test::contains(msg, "wte.weight (checkpoint [256, 32], model [256, 64])"));
}

TEST_CASE("two accumulated micro-batches step as one batch of twice the size") {
  std::string dir = test::scratch_dir("gpt_trainer_accum");
  std::ostringstream log;
  TrainConfig big = config(dir);
  big.gpt.dropout = 0.0;
  big.batch_size = 8;
  big.max_steps = 3;
  TrainConfig small = big;
  small.batch_size = 4;
  small.total_batch_tokens = 8 * 32;
  TrainResult rb = kiln::train::gpt::train(big, log), rs = kiln::train::gpt::train(small, log);
  CHECK(rs.grad_accum == 2);
  REQUIRE(rs.step_losses.size() == 3);
  for (int i = 0; i < 3; ++i) CHECK(rs.step_losses[i] == doctest::Approx(rb.step_losses[i]).epsilon(1e-5));
}

TEST_CASE("bad data and budgets are refused, naming the flag and the value") {
  std::string dir = test::scratch_dir("gpt_trainer_errors");
  std::ostringstream log;
  TrainConfig c = config(dir);
  c.data = dir + "/missing.txt";
  CHECK(test::contains(test::error_of([&] { kiln::train::gpt::train(c, log); }), "--data: '" + dir + "/missing.txt' does not exist"));
  c = config(dir);
  c.total_batch_tokens = 100;
  CHECK(test::contains(test::error_of([&] { kiln::train::gpt::train(c, log); }), "--total-batch-tokens 100 is not a multiple"));
  c = config(dir);
  std::ofstream(dir + "/tiny.txt") << "too short";
  c.data = dir + "/tiny.txt";
  CHECK(test::contains(test::error_of([&] { kiln::train::gpt::train(c, log); }), "too small"));
}

TEST_CASE("batches are a function of (seed, row): the same rows give the same windows") {
  std::vector<uint8_t> tokens(1000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint8_t>(i % 251);
  auto ids = byte_token_ids(false);
  Batch a = random_batch(tokens, ids, 4, 16, 7, 100), b = random_batch(tokens, ids, 4, 16, 7, 100);
  Batch c = random_batch(tokens, ids, 4, 16, 7, 104);
  CHECK(test::identical(a.x, b.x));
  CHECK(!test::identical(a.x, c.x));
  // Targets are the inputs shifted by one.
  CHECK(test::identical(a.x.narrow(1, 1, 15), a.y.narrow(1, 0, 15)));
  // GPT-2's byte tokens: '!' is id 0, byte 0 comes after the 188 printable ones, and decoding inverts.
  auto gpt2 = byte_token_ids(true);
  CHECK(gpt2['!'] == 0);
  CHECK(gpt2[0] == 188);
  for (int byte = 0; byte < 256; ++byte) CHECK(token_byte(gpt2[byte], true) == byte);
}
