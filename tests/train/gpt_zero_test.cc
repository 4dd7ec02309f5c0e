// The GPT trainer with --ddp --zero 1 on 2 and 3 real ranks (127.0.0.1): AdamW's two parameter
// groups (decay / no decay), gradient clipping to the global norm across the shards and two
// accumulated micro-batches end with the weights of the same run under plain --ddp (within 1e-6,
// f32 and bf16 autocast); a ZeRO run stopped, saved (consolidated) and resumed ends as the uninterrupted one,
// and the same checkpoint resumes in a plain --ddp run (and a plain one in a ZeRO run).
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "core/ops.h"
#include "train/gpt_trainer.h"
#include "train/checkpoint.h"
#include "tests/distributed/multiprocess.h"
#include "tests/train/gpt_sharded_util.h"
#include "tests/train/gpt_test_config.h"

using namespace kiln;
using namespace kiln::models::gpt;
using namespace kiln::train::gpt;

namespace {

using test::sharded::read;
using test::sharded::weight_diff;

/// 2 layers, width 32; 2 ranks x 2 sequences x 16 tokens x 2 accumulated micro-batches per step;
/// `dir` holds the corpus.
TrainConfig config(const std::string& dir) {
  TrainConfig c = test::tiny_gpt_config(dir);
  c.gpt.block_size = 16;
  c.gpt.dropout = 0;
  c.batch_size = 2;
  c.total_batch_tokens = 2 * 16 * 2 * 2;
  c.max_steps = 6;
  c.grad_clip = 0.5;  // below the first steps' norms (checked from the log): clipping acts
  c.eval_every = 0;
  c.sample_tokens = 0;
  c.ddp = true;
  return c;
}

/// Runs `c` on `world` ranks (to step `until`); rank 0's log goes to `log_path`.
void run_ranks(int world, const TrainConfig& c, int64_t until, const std::string& log_path, const std::string& name) {
  test::require_all_ok(test::run_ranks(world, [&](int rank, int) {
    std::ofstream log(rank == 0 ? log_path : std::string("/dev/null"));
    TrainResult r = kiln::train::gpt::train(c, log);
    test::expect(r.world_size == world && r.steps_done == until, "rank {}: world {}, step {} (want {})", rank,
                 r.world_size, r.steps_done, until);
  }, 240, "ranks_" + name));
}

void run2(const TrainConfig& c, int64_t until, const std::string& log_path, const std::string& name) {
  run_ranks(2, c, until, log_path, name);
}



/// The norms of rank 0's progress lines ("| norm 1.234 |").
std::vector<double> norms(const std::string& log) {
  std::vector<double> v;
  for (size_t at = log.find("| norm "); at != std::string::npos; at = log.find("| norm ", at + 1))
    v.push_back(std::stod(log.substr(at + 7)));
  return v;
}

}  // namespace

TEST_CASE("--zero 1 ends with plain --ddp's weights: AdamW groups, clipping, accumulation, f32 and bf16") {
  const std::string dir = test::scratch_dir("gpt_zero_equal");
  for (const std::string amp : {"none", "bf16"}) {
    TrainConfig plain = config(dir);
    plain.amp = amp;
    plain.save = dir + "/ddp_" + amp + ".safetensors";
    TrainConfig zero = plain;
    zero.zero = 1;
    zero.save = dir + "/zero_" + amp + ".safetensors";
    run2(plain, 6, dir + "/ddp_" + amp + ".log", "gpt_zero_ddp_" + amp);
    run2(zero, 6, dir + "/zero_" + amp + ".log", "gpt_zero_zero_" + amp);
    const std::string log = read(dir + "/zero_" + amp + ".log");
    INFO(amp << " ZeRO log:\n" << log);
    CHECK(test::contains(log, "ZeRO-1: ZeroRedundancyOptimizer(AdamW)"));
    CHECK(test::contains(log, "optimizer state sharded over 2 ranks"));
    CHECK(test::contains(log, "x 2 micro-steps x 2 ranks"));
    // The norm each rank clipped to is the whole gradient's: the same as plain DDP's, and above the limit.
    const std::vector<double> zn = norms(log), dn = norms(read(dir + "/ddp_" + amp + ".log"));
    REQUIRE(zn.size() == 6);
    REQUIRE(dn.size() == 6);
    CHECK(zn[0] > plain.grad_clip);
    for (size_t i = 0; i < zn.size(); ++i) CHECK(std::abs(zn[i] - dn[i]) <= 1.5e-3);  // printed to 3 decimals
    const double d = weight_diff(plain, plain.save, zero.save);
    MESSAGE(amp << ": max |ZeRO - DDP| over the weights = " << d);
    CHECK(d <= 1e-6);
  }
  // The comparison means something: the weights moved from their initialisation.
  TrainConfig init = config(dir);
  init.max_steps = 1, init.lr = 0, init.min_lr = 0;  // one step at lr 0: the initial weights
  init.save = dir + "/init.safetensors";
  run2(init, 1, dir + "/init.log", "gpt_zero_init");
  CHECK(weight_diff(init, init.save, dir + "/zero_none.safetensors") > 1e-3);
}

TEST_CASE("--zero 1 on 3 ranks (each bucket padded to a multiple of 3) ends within 1e-6 of plain --ddp") {
  const std::string dir = test::scratch_dir("gpt_zero_three");
  TrainConfig plain = config(dir);
  plain.total_batch_tokens = 2 * 16 * 3 * 2;
  plain.save = dir + "/ddp.safetensors";
  TrainConfig zero = plain;
  zero.zero = 1;
  zero.save = dir + "/zero.safetensors";
  run_ranks(3, plain, 6, dir + "/ddp.log", "gpt_zero3_ddp");
  run_ranks(3, zero, 6, dir + "/zero.log", "gpt_zero3_zero");
  CHECK(test::contains(read(dir + "/zero.log"), "optimizer state sharded over 3 ranks"));
  const double d = weight_diff(plain, plain.save, zero.save);
  MESSAGE("3 ranks: max |ZeRO - DDP| over the weights = " << d);
  CHECK(d <= 1e-6);
}

TEST_CASE("a ZeRO run saved, stopped and resumed equals the uninterrupted run; plain and ZeRO runs resume each other") {
  const std::string dir = test::scratch_dir("gpt_zero_resume");
  TrainConfig whole = config(dir);
  whole.zero = 1;
  whole.save = dir + "/whole.safetensors";
  run2(whole, 6, dir + "/whole.log", "gpt_zero_whole");
  TrainConfig plain_whole = config(dir);
  plain_whole.save = dir + "/plain_whole.safetensors";
  run2(plain_whole, 6, dir + "/plain_whole.log", "gpt_zero_plain_whole");

  for (int first : {1, 0}) {    // the ZeRO stage of the run that stops after 3 steps
    for (int second : {1, 0}) {  // and of the one that resumes it
      TrainConfig a = config(dir);
      a.zero = first;
      a.save = dir + fmt::format("/part{}{}.safetensors", first, second);
      a.stop_after_steps = 3;
      run2(a, 3, dir + "/part.log", "gpt_zero_part");
      TrainConfig b = a;
      b.zero = second;
      b.stop_after_steps = 0;
      b.resume = a.save;
      const std::string log = dir + fmt::format("/resume{}{}.log", first, second);
      run2(b, 6, log, "gpt_zero_resume");
      INFO("stopped with --zero " << first << ", resumed with --zero " << second << ":\n" << read(log));
      CHECK(test::contains(read(log), "resumed from " + a.save + " at step 3"));
      const double d = weight_diff(whole, second ? whole.save : plain_whole.save, b.save);
      MESSAGE("stopped with --zero " << first << ", resumed with --zero " << second
              << ": max |resumed - uninterrupted| = " << d);
      CHECK(d <= (first == second ? 0.0 : 1e-6));
    }
  }
}

TEST_CASE("--zero needs --ddp and a stage from 1 to 3") {
  const std::string dir = test::scratch_dir("gpt_zero_errors");
  TrainConfig c = config(dir);
  c.ddp = false;
  c.zero = 1;
  std::ostringstream log;
  CHECK(test::contains(test::error_of([&] { kiln::train::gpt::train(c, log); }), "--zero 1 shards the optimizer state over data-parallel ranks: add --ddp"));
  c.zero = 4;
  CHECK(test::contains(test::error_of([&] { kiln::train::gpt::train(c, log); }), "--zero 4: the stages are 1"));
}
