// The pipelined GPT trainer with each stage sharded over its data-parallel ranks (--pipeline-stages
// 2 --ddp --zero 2|3, and 3D: --tp 2 --fsdp) on real ranks (127.0.0.1): data 2 x pipeline 2 with
// ZeRO-2 and with ZeRO-3, 2 micro-batches a pipeline batch and 2 accumulation steps a step (the
// gradients reduce-scattered once per step), and data 2 x pipeline 2 x tensor 2 (8 processes) with
// --fsdp, end with one process's weights (within 1e-5, f32; a weight decay of 5 so that decaying a
// bias or an embedding would show) and the tie intact; runs stopped and resumed in the same layout
// end bit-identical to the uninterrupted ones, and the checkpoint (the one-process format) resumes
// in one process. Launches that cannot work are refused naming the numbers.
#include <doctest/doctest.h>

#include <ostream>

#include "train/gpt_trainer.h"
#include "tests/distributed/multiprocess.h"
#include "tests/train/gpt_sharded_util.h"

using namespace kiln;
using namespace kiln::train::gpt;
using namespace kiln::test::sharded;

namespace {

TrainConfig pipelined(const TrainConfig& base, int tp, int zero, const std::string& save) {
  TrainConfig c = layout(base, tp, zero, save);
  c.pipeline_stages = 2;
  c.micro_batches = 2;
  return c;
}

}  // namespace

TEST_CASE("pipeline 2 x data 2 with --zero 2 and --zero 3 ends with one process's weights and resumes bit for bit") {
  const std::string dir = test::scratch_dir("gpt_pipeline_zero");
  const TrainConfig base = config(dir);
  const TrainConfig one = layout(base, 1, 0, dir + "/one.safetensors");
  run(1, one, 6, dir + "/one.log", "gpt_pipeline_zero_one");
  TrainConfig init = one;  // one step at lr 0: the initial weights, to show the runs moved from them
  init.max_steps = 1, init.lr = 0, init.min_lr = 0, init.save = dir + "/init.safetensors";
  run(1, init, 1, dir + "/init.log", "gpt_pipeline_zero_init");
  CHECK(weight_diff(base, init.save, one.save) > 1e-2);

  for (const int zero : {2, 3}) {
    const std::string tag = fmt::format("z{}", zero);
    const TrainConfig whole = pipelined(base, 1, zero, dir + "/whole_" + tag + ".safetensors");
    const std::string log = run(4, whole, 6, dir + "/whole_" + tag + ".log", "gpt_pipeline_zero_whole");
    INFO(tag << ":\n" << log);
    CHECK(test::contains(log, "world 4 = data 2 x pipeline 2 x tensor 1"));
    CHECK(test::contains(log, fmt::format("ZeRO-{} per stage", zero)));
    CHECK(test::contains(log, "reduce-scattered once per step"));
    CHECK(test::contains(log, "x 2 micro-steps x 2 data-parallel replicas"));
    CHECK(test::contains(log, "the last stage's copy differs from wte by at most 0\n"));
    const double d = weight_diff(base, one.save, whole.save);
    MESSAGE("pipeline 2 x data 2 --zero " << zero << ": max |sharded - one process| = " << d);
    CHECK(d <= 1e-5);

    TrainConfig a = pipelined(base, 1, zero, dir + "/part_" + tag + ".safetensors");
    a.stop_after_steps = 3;
    run(4, a, 3, dir + "/part_" + tag + ".log", "gpt_pipeline_zero_part");
    TrainConfig b = a;
    b.stop_after_steps = 0, b.resume = a.save, b.save = dir + "/resumed_" + tag + ".safetensors";
    CHECK(test::contains(run(4, b, 6, dir + "/resumed_" + tag + ".log", "gpt_pipeline_zero_resumed"),
                         "resumed from " + a.save + " at step 3"));
    CHECK(weight_diff(base, whole.save, b.save) == 0.0);
    // The gathered checkpoint is the one-process trainer's: one process resumes it.
    TrainConfig solo = layout(base, 1, 0, dir + "/solo_" + tag + ".safetensors");
    solo.resume = a.save;
    run(1, solo, 6, dir + "/solo_" + tag + ".log", "gpt_pipeline_zero_solo");
    const double d1 = weight_diff(base, one.save, solo.save);
    MESSAGE("its step-3 checkpoint resumed in one process: max |resumed - one process| = " << d1);
    CHECK(d1 <= 1e-5);
  }
}

TEST_CASE("3D with --fsdp: data 2 x pipeline 2 x tensor 2 (8 processes) ends with one process's weights") {
  const std::string dir = test::scratch_dir("gpt_pipeline_zero_3d");
  const TrainConfig base = config(dir);
  const TrainConfig one = layout(base, 1, 0, dir + "/one.safetensors");
  run(1, one, 6, dir + "/one.log", "gpt_pipeline_zero_3d_one");
  const TrainConfig c = pipelined(base, 2, 3, dir + "/3d.safetensors");
  const std::string log = run(8, c, 6, dir + "/3d.log", "gpt_pipeline_zero_3d_run");
  INFO("3D log:\n" << log);
  CHECK(test::contains(log, "world 8 = data 2 x pipeline 2 x tensor 2"));
  CHECK(test::contains(log, "ZeRO-3 per stage"));
  CHECK(test::contains(log, "the last stage's copy differs from wte by at most 0\n"));
  const double d = weight_diff(base, one.save, c.save);
  MESSAGE("3D 2x2x2 --fsdp: max |3D - one process| = " << d);
  CHECK(d <= 1e-5);
}

TEST_CASE("pipelined ZeRO launches that cannot work are refused, naming the numbers") {
  const std::string dir = test::scratch_dir("gpt_pipeline_zero_errors");
  std::ostream quiet(nullptr);
  TrainConfig c = pipelined(config(dir), 1, 1, "");
  CHECK(test::contains(test::error_of([&] { kiln::train::gpt::train(c, quiet); }),
                       "--pipeline-stages 2: --zero 1 is not supported with the pipelined GPT"));
  c = pipelined(config(dir), 1, 2, "");
  c.ddp = false;
  CHECK(test::contains(test::error_of([&] { kiln::train::gpt::train(c, quiet); }),
                       "--pipeline-stages 2 --zero 2: the stages shard over their data-parallel replicas: add --ddp"));
  c = pipelined(config(dir), 1, 3, "");
  c.hsdp_shard_size = 2;
  CHECK(test::contains(test::error_of([&] { kiln::train::gpt::train(c, quiet); }),
                       "--pipeline-stages 2: --hsdp-shard-size 2 is not supported with the pipeline"));
}
