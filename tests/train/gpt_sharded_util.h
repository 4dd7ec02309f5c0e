// The sharded GPT trainer tests' helpers: a small config (2 layers, 4 heads, width 32), a run of
// the trainer on N real ranks with rank 0's log kept, and the largest weight difference between
// two checkpoints.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>

#include "core/ops.h"
#include "tests/distributed/multiprocess.h"
#include "tests/file_util.h"
#include "tests/train/gpt_test_config.h"
#include "train/checkpoint.h"
#include "train/gpt_trainer.h"

namespace kiln::test::sharded {

using train::gpt::TrainConfig;
using train::gpt::TrainResult;
using models::gpt::GPT;

/// 2 layers, 4 heads, width 32, vocabulary 256; 128 tokens per step (one process: 4 micro-batches
/// of 2 x 16), 6 steps, clipping that acts, decay 5 (x lr 3e-3: 1.5 % a step on the matrices).
inline TrainConfig config(const std::string& dir) {
  TrainConfig c = test::tiny_gpt_config(dir);
  c.gpt.block_size = 16;
  c.gpt.n_head = 4;
  c.gpt.dropout = 0;
  c.batch_size = 2;
  c.total_batch_tokens = 2 * 16 * 4;
  c.max_steps = 6;
  c.grad_clip = 0.5;
  c.weight_decay = 5;
  c.eval_every = 0;
  c.sample_tokens = 0;
  c.threads = 1;
  return c;
}

inline TrainConfig layout(TrainConfig c, int tp, int zero, const std::string& save) {
  c.tp = tp, c.zero = zero, c.ddp = zero > 0 || c.ddp;
  c.save = save;
  return c;
}

inline std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

/// Runs `c` on `world` ranks (to step `until`); rank 0's log goes to `log_path`, which is returned.
inline std::string run(int world, const TrainConfig& c, int64_t until, const std::string& log_path, const std::string& name) {
  test::require_all_ok(test::run_ranks(world, [&](int rank, int) {
    std::ofstream log(rank == 0 ? log_path : std::string("/dev/null"));
    TrainResult r = kiln::train::gpt::train(c, log);
    test::expect(r.steps_done == until, "rank {}: step {} (want {})", rank, r.steps_done, until);
  }, 240, name));
  return read(log_path);
}

/// The largest difference between the weights of two checkpoints of `c`'s model (in a child
/// process: this one forks the ranks and starts no threads of its own).
inline double weight_diff(const TrainConfig& c, const std::string& a, const std::string& b) {
  const std::string out = test::scratch_dir("gpt_sharded_diff") + "/diff";
  test::require_all_ok(test::run_ranks(1, [&](int, int) {
    GPT ma(c.gpt), mb(c.gpt);
    train::load_checkpoint(a, ma, nullptr, nullptr);
    train::load_checkpoint(b, mb, nullptr, nullptr);
    auto pa = ma.parameters(), pb = mb.parameters();
    double d = 0;
    for (size_t i = 0; i < pa.size(); ++i) d = std::max(d, static_cast<double>((pa[i] - pb[i]).abs().max().item<float>()));
    std::ofstream(out) << fmt::format("{:.17g}", d);
  }, 60, "gpt_sharded_diff"));
  return std::stod(read(out));
}

/// The one-process reference every sharded layout is held to: `base` run to its last step in one
/// process, saved to DIR/one.safetensors, and checked to have moved the weights from their initial
/// values (one step at lr 0, saved to DIR/init.safetensors). Returns the one-process config.
inline TrainConfig one_process_reference(const TrainConfig& base, const std::string& dir, const std::string& name) {
  const TrainConfig one = layout(base, 1, 0, dir + "/one.safetensors");
  run(1, one, base.max_steps, dir + "/one.log", name + "_one");
  TrainConfig init = one;
  init.max_steps = 1, init.lr = 0, init.min_lr = 0, init.save = dir + "/init.safetensors";
  run(1, init, 1, dir + "/init.log", name + "_init");
  CHECK(weight_diff(base, init.save, one.save) > 1e-2);
  return one;
}

}  // namespace kiln::test::sharded
