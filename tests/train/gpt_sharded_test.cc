// The GPT trainer with --tp and --zero 2|3 on 2 and 4 real ranks (127.0.0.1), and 3D (data 2 x
// pipeline 2 x tensor 2, 8 processes): each layout ends with one process's weights (within 1e-5, f32; a weight decay of 5 so that decaying a bias or a
// LayerNorm under FSDP's flat shards would show), a run stopped and resumed in the same layout
// ends bit-identical to the uninterrupted one, and a checkpoint resumes into another layout
// (another data or tensor size, one process) within 1e-5. With dropout, --tp 2 runs repeat and
// resume bit for bit. Layouts that cannot work are refused with their numbers.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "core/ops.h"
#include "train/checkpoint.h"
#include "train/gpt_sharded.h"
#include "train/gpt_trainer.h"
#include "tests/distributed/multiprocess.h"
#include "tests/train/gpt_sharded_util.h"

using namespace kiln;
using namespace kiln::models::gpt;
using namespace kiln::train::gpt;
using namespace kiln::test::sharded;

TEST_CASE("--tp 2 (and --sequence-parallel), --zero 2|3 on 2 ranks, --tp 2 --ddp and --tp 2 --zero 3 on 4 ranks end with one process's weights") {
  const std::string dir = test::scratch_dir("gpt_sharded_equal");
  const TrainConfig base = config(dir);
  const TrainConfig one = one_process_reference(base, dir, "gpt_sharded");

  struct Case {
    int world, tp, zero;
    const char* layout_line;
    bool sequence_parallel = false;
  };
  for (const Case k : {Case{2, 2, 0, "world 2 = data 1 x pipeline 1 x tensor 2"},
                       Case{2, 2, 0, "world 2 = data 1 x pipeline 1 x tensor 2", true},
                       Case{2, 1, 3, "world 2 = data 2 x pipeline 1 x tensor 1"},
                       Case{2, 1, 2, "world 2 = data 2 x pipeline 1 x tensor 1"},
                       Case{4, 2, 0, "world 4 = data 2 x pipeline 1 x tensor 2"},
                       Case{4, 2, 3, "world 4 = data 2 x pipeline 1 x tensor 2"}}) {
    const std::string tag = fmt::format("w{}tp{}z{}sp{}", k.world, k.tp, k.zero, k.sequence_parallel);
    TrainConfig c = layout(base, k.tp, k.zero, dir + "/" + tag + ".safetensors");
    c.ddp = c.ddp || k.world > k.tp;
    c.sequence_parallel = k.sequence_parallel;
    const std::string log = run(k.world, c, 6, dir + "/" + tag + ".log", "gpt_sharded_layout");
    INFO(tag << ":\n" << log);
    CHECK(test::contains(log, k.layout_line));
    CHECK(test::contains(log, fmt::format("x {} data ranks", k.world / k.tp)));
    const double d = weight_diff(base, one.save, c.save);
    MESSAGE("world " << k.world << " --tp " << k.tp << " --zero " << k.zero
            << std::string(k.sequence_parallel ? " --sequence-parallel" : "") << ": max |sharded - one process| = " << d);
    CHECK(d <= 1e-5);
  }
}

TEST_CASE("--tp 2 and --zero 3 runs stopped and resumed end bit-identical; their checkpoints resume into other layouts") {
  const std::string dir = test::scratch_dir("gpt_sharded_resume");
  const TrainConfig base = config(dir);
  struct Case {
    int world, tp, zero;
  };
  for (const Case k : {Case{2, 2, 0}, Case{2, 1, 3}}) {
    const std::string tag = fmt::format("tp{}z{}", k.tp, k.zero);
    const TrainConfig whole = layout(base, k.tp, k.zero, dir + "/whole_" + tag + ".safetensors");
    run(k.world, whole, 6, dir + "/whole_" + tag + ".log", "gpt_sharded_whole");
    TrainConfig a = layout(base, k.tp, k.zero, dir + "/part_" + tag + ".safetensors");
    a.stop_after_steps = 3;
    run(k.world, a, 3, dir + "/part_" + tag + ".log", "gpt_sharded_part");
    TrainConfig b = a;
    b.stop_after_steps = 0, b.resume = a.save, b.save = dir + "/resumed_" + tag + ".safetensors";
    const std::string log = run(k.world, b, 6, dir + "/resumed_" + tag + ".log", "gpt_sharded_resumed");
    INFO(tag << " resumed:\n" << log);
    CHECK(test::contains(log, "resumed from " + a.save + " at step 3"));
    CHECK(weight_diff(base, whole.save, b.save) == 0.0);

    // The same checkpoint into another layout: --tp 2 --zero 3 on 4 ranks (data 2), and one process.
    for (const Case other : {Case{4, 2, 3}, Case{1, 1, 0}}) {
      TrainConfig o = layout(base, other.tp, other.zero, dir + fmt::format("/other_{}_w{}.safetensors", tag, other.world));
      o.ddp = o.ddp || other.world > other.tp;
      o.resume = a.save;
      const std::string olog = run(other.world, o, 6, dir + "/other.log", "gpt_sharded_other");
      CHECK(test::contains(olog, "resumed from " + a.save + " at step 3"));
      const double d = weight_diff(base, whole.save, o.save);
      MESSAGE(tag << " on " << k.world << " ranks, resumed on " << other.world << " ranks (--tp " << other.tp
              << " --zero " << other.zero << "): max |resumed - uninterrupted| = " << d);
      CHECK(d <= 1e-5);
    }
  }
}

TEST_CASE("layouts that cannot work are refused, naming the numbers") {
  const std::string dir = test::scratch_dir("gpt_sharded_errors");
  TrainConfig c = config(dir);
  c.tp = 3;
  c.ddp = true;
  CHECK(test::contains(test::error_of([&] { sharded_layout(c, 3); }), "n_head 4 does not divide by the tensor-parallel size 3"));
  c.gpt.n_head = 3, c.gpt.n_embd = 48;
  CHECK(test::contains(test::error_of([&] { sharded_layout(c, 3); }), "vocab_size 256 does not divide by the tensor-parallel size 3"));
  c = config(dir);
  c.tp = 2;
  CHECK(test::contains(test::error_of([&] { sharded_layout(c, 3); }), "the world of 3 ranks is not data x tensor"));
  CHECK(test::contains(test::error_of([&] { sharded_layout(c, 4); }), "--tp 2: 4 ranks started; without --ddp start exactly 2"));
  c.ddp = true;
  CHECK(sharded_layout(c, 4).data() == 2);
  c.zero = 1;
  CHECK(test::contains(test::error_of([&] { sharded_layout(c, 4); }), "--tp 2 with --zero 1"));
  c.zero = 3;
  c.pipeline_stages = 2;
  CHECK(test::contains(test::error_of([&] { sharded_layout(c, 8); }), "--pipeline-stages 2 --tp 2 --zero 3: the pipelined trainer runs this layout"));
  c = config(dir);
  c.zero = 3;
  CHECK(test::contains(test::error_of([&] { sharded_layout(c, 2); }), "--zero 3 shards over data-parallel ranks: add --ddp"));
  c.ddp = true;
  c.gpt.checkpoint_activations = true;
  CHECK(test::contains(test::error_of([&] { sharded_layout(c, 2); }), "--activation-checkpointing is not supported under FSDP"));
}

TEST_CASE("3D: data 2 x pipeline 2 x tensor 2 (8 processes) ends with one process's weights; its checkpoint resumes") {
  const std::string dir = test::scratch_dir("gpt_sharded_3d");
  const TrainConfig base = config(dir);
  const TrainConfig one = layout(base, 1, 0, dir + "/one.safetensors");
  run(1, one, 6, dir + "/one.log", "gpt_sharded_3d_one");
  TrainConfig c = layout(base, 2, 0, dir + "/3d.safetensors");
  c.ddp = true;
  c.pipeline_stages = 2;
  c.micro_batches = 2;
  c.stop_after_steps = 3;
  const std::string log = run(8, c, 3, dir + "/3d.log", "gpt_sharded_3d_part");
  INFO("3D log:\n" << log);
  CHECK(test::contains(log, "world 8 = data 2 x pipeline 2 x tensor 2"));
  CHECK(test::contains(log, "rank   5: data  1  stage  0  tensor  1"));
  CHECK(test::contains(log, "the last stage's copy differs from wte by at most 0"));
  // Resumed in 3D for the last 3 steps, and, from the same checkpoint, in one process.
  TrainConfig b = c;
  b.stop_after_steps = 0, b.resume = c.save, b.save = dir + "/3d_resumed.safetensors";
  CHECK(test::contains(run(8, b, 6, dir + "/3d_resumed.log", "gpt_sharded_3d_resumed"), "resumed from"));
  TrainConfig solo = layout(base, 1, 0, dir + "/solo_resumed.safetensors");
  solo.resume = c.save;
  run(1, solo, 6, dir + "/solo.log", "gpt_sharded_3d_solo");
  const double d3 = weight_diff(base, one.save, b.save), d1 = weight_diff(base, one.save, solo.save);
  MESSAGE("3D 2x2x2: max |3D - one process| = " << d3 << "; its step-3 checkpoint resumed in one process: " << d1);
  CHECK(d3 <= 1e-5);
  CHECK(d1 <= 1e-5);
}

TEST_CASE("--tp 2 --sequence-parallel with dropout: two runs are identical and a stopped run resumes bit for bit") {
  // The sharded regions' dropout generators are derived from the default generator per draw
  // (distributed/tensor_parallel/random.h), so the checkpoint's generator state resumes them too.
  const std::string dir = test::scratch_dir("gpt_sharded_dropout");
  TrainConfig base = config(dir);
  base.gpt.dropout = 0.2;
  base.sequence_parallel = true;
  const TrainConfig a = layout(base, 2, 0, dir + "/a.safetensors"), b = layout(base, 2, 0, dir + "/b.safetensors");
  run(2, a, 6, dir + "/a.log", "gpt_sharded_dropout_a");
  run(2, b, 6, dir + "/b.log", "gpt_sharded_dropout_b");
  CHECK(weight_diff(base, a.save, b.save) == 0.0);
  TrainConfig part = layout(base, 2, 0, dir + "/part.safetensors");
  part.stop_after_steps = 3;
  run(2, part, 3, dir + "/part.log", "gpt_sharded_dropout_part");
  TrainConfig resumed = part;
  resumed.stop_after_steps = 0, resumed.resume = part.save, resumed.save = dir + "/resumed.safetensors";
  CHECK(test::contains(run(2, resumed, 6, dir + "/resumed.log", "gpt_sharded_dropout_resumed"), "resumed from"));
  CHECK(weight_diff(base, a.save, resumed.save) == 0.0);
  TrainConfig none = layout(base, 2, 0, dir + "/none.safetensors");  // dropout did act
  none.gpt.dropout = 0;
  run(2, none, 6, dir + "/none.log", "gpt_sharded_dropout_none");
  CHECK(weight_diff(base, a.save, none.save) > 1e-4);
}
