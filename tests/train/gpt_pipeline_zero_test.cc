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
#include <sstream>
#include <vector>

#include "core/grad_mode.h"
#include "distributed/backend/init.h"
#include "train/gpt_pipeline_zero.h"
#include "train/gpt_trainer.h"
#include "tests/distributed/multiprocess.h"
#include "tests/train/gpt_sharded_util.h"

using namespace kiln;
using namespace kiln::train::gpt;
using namespace kiln::test::sharded;

namespace {

bool same(const Tensor& a, const Tensor& b) {
  return a.sizes() == b.sizes() && (a.to(kFloat64) - b.to(kFloat64)).abs().max().item<double>() == 0;
}

// The "| scale ..." notes of a log's step lines, in order.
std::vector<std::string> scale_notes(const std::string& log) {
  std::vector<std::string> notes;
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);)
    if (line.starts_with("step ") && line.find(" | scale ") != std::string::npos)
      notes.push_back(line.substr(line.find(" | scale ")));
  return notes;
}

TrainConfig pipelined(const TrainConfig& base, int tp, int zero, const std::string& save) {
  TrainConfig c = layout(base, tp, zero, save);
  c.pipeline_stages = 2;
  c.micro_batches = 2;
  return c;
}

}  // namespace

// ShardedStage on 3 ranks, with parameters whose sizes do not divide by 3 (padding): ZeRO-3
// frees the whole parameters and gathers them back exactly; one reduce-scatter leaves each rank
// its chunk of the ranks' mean gradient and frees the whole ones; a step of AdamW on the shards
// gives the parameters and moments of one AdamW (make_optimizer) stepped on the whole mean
// gradient, and the gathered state loads back into the shards.
TEST_CASE("ShardedStage: ZeRO-3 frees and regathers, reduce-scatters the mean gradient, steps as one AdamW") {
  test::require_all_ok(test::run_ranks(3, [](int rank, int) {
    auto pg = dist::init_process_group();
    TrainConfig c;
    c.zero = 3, c.lr = 1e-2, c.weight_decay = 0.5;
    auto values = [](int64_t n, double scale) {
      std::vector<float> v;
      for (int64_t i = 0; i < n; ++i) v.push_back(static_cast<float>(scale * std::sin(1.0 + 0.7 * static_cast<double>(i))));
      return v;
    };
    const std::vector<std::pair<std::string, Shape>> shapes = {
        {"h.0.mlp.c_fc.weight", {5, 3}}, {"h.0.mlp.c_fc.bias", {7}}, {"wte.weight", {4, 2}}};
    nn::NamedTensors named, reference;
    for (const auto& [name, shape] : shapes) {
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      named.emplace_back(name, tensor(values(n, 1.0), shape).requires_grad_());
      reference.emplace_back(name, tensor(values(n, 1.0), shape).requires_grad_());
    }
    ShardedStage stage(c, named, pg, kCPU);
    for (const auto& [name, p] : named)
      test::expect(p.storage()->nbytes() == 0, "rank {}: '{}' still holds {} bytes under ZeRO-3", rank, name,
                   p.storage()->nbytes());
    test::expect(stage.local_numel() == 5 + 3 + 3, "rank {}: {} elements kept, not 5 + 3 + 3", rank, stage.local_numel());
    stage.gather();
    for (size_t i = 0; i < named.size(); ++i)
      test::expect(same(named[i].second, reference[i].second), "rank {}: '{}' gathered differs", rank, named[i].first);
    // Rank r's gradient: (r + 1) x g; their mean: 2 g.
    for (size_t i = 0; i < named.size(); ++i) {
      const Tensor g = tensor(values(named[i].second.numel(), 0.3), named[i].second.sizes());
      named[i].second.set_grad(g * static_cast<double>(rank + 1));
      reference[i].second.set_grad(g * 2.0);
    }
    stage.reduce_scatter();
    for (const auto& [name, p] : named) test::expect(!p.grad().defined(), "rank {}: '{}' kept its whole gradient", rank, name);
    auto ref_opt = make_optimizer(c, reference);
    ref_opt->step();
    stage.optimizer().step();
    stage.after_step();
    test::expect(named[0].second.storage()->nbytes() == 0, "rank {}: not freed after the step", rank);
    stage.gather();
    for (size_t i = 0; i < named.size(); ++i) {
      const double d = (named[i].second - reference[i].second).abs().max().item<float>();
      test::expect(d <= 1e-6, "rank {}: '{}' after the step differs from one AdamW's by {}", rank, named[i].first, d);
    }
    const optim::StateDict whole = stage.whole_state(), want = ref_opt->state_dict();
    test::expect(whole.size() == want.size(), "rank {}: {} state keys, one AdamW has {}", rank, whole.size(), want.size());
    for (const auto& [key, v] : want) {
      test::expect(whole.count(key) == 1, "rank {}: no '{}' in the gathered state", rank, key);
      const double d = (whole.at(key).to(kFloat64) - v.to(kFloat64)).abs().max().item<double>();
      test::expect(d <= 1e-6, "rank {}: '{}' differs from one AdamW's by {}", rank, key, d);
    }
    stage.load_whole_state(whole);  // cut back into the shards: gathers to the same state
    for (const auto& [key, v] : stage.whole_state())
      test::expect(same(v, whole.at(key)), "rank {}: '{}' changed through load_whole_state", rank, key);
  }, 120, "gpt_pipeline_zero_stage"));
}

TEST_CASE("pipeline 2 x data 2 with --zero 2 and --zero 3 ends with one process's weights and resumes bit for bit") {
  const std::string dir = test::scratch_dir("gpt_pipeline_zero");
  const TrainConfig base = config(dir);
  const TrainConfig one = one_process_reference(base, dir, "gpt_pipeline_zero");

  for (const int zero : {2, 3}) {
    const std::string tag = fmt::format("z{}", zero);
    const TrainConfig whole = pipelined(base, 1, zero, dir + "/whole_" + tag + ".safetensors");
    const std::string log = run(4, whole, 6, dir + "/whole_" + tag + ".log", "gpt_pipeline_zero_whole");
    INFO(tag << ":\n" << log);
    CHECK(test::contains(log, "world 4 = data 2 x pipeline 2 x tensor 1"));
    CHECK(test::contains(log, fmt::format("ZeRO-{} per stage", zero)));
    CHECK(test::contains(log, "reduce-scattered once per step"));
    CHECK(test::contains(log, "stage 0 keeps 0.011M of its 0.021M parameters per rank"));
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
  // ZeRO-3 keeps the parameters gathered for the whole step, so a block's activations can be
  // recomputed in backward (--activation-checkpointing).
  TrainConfig ac = pipelined(base, 1, 3, dir + "/ac.safetensors");
  ac.gpt.checkpoint_activations = true;
  CHECK(test::contains(run(4, ac, 6, dir + "/ac.log", "gpt_pipeline_zero_ac"), "2 of 2 blocks recompute"));
  const double dac = weight_diff(base, one.save, ac.save);
  MESSAGE("pipeline 2 x data 2 --zero 3 --activation-checkpointing: max |sharded - one process| = " << dac);
  CHECK(dac <= 1e-5);
  // Interleaved 1F1B over 2 x 2 virtual stages: each rank's two chunks sharded together.
  TrainConfig il = pipelined(base, 1, 2, dir + "/il.safetensors");
  il.pipeline_schedule = "interleaved", il.virtual_stages = 2;
  CHECK(test::contains(run(4, il, 6, dir + "/il.log", "gpt_pipeline_zero_il"), "interleaved x 2 virtual stages"));
  const double dil = weight_diff(base, one.save, il.save);
  MESSAGE("pipeline 2 x 2 virtual (interleaved) x data 2 --zero 2: max |sharded - one process| = " << dil);
  CHECK(dil <= 1e-5);
}

// Started at a loss scale of 2^19 the f16 gradients overflow and the first steps are skipped on
// every rank (the found-inf flag shared over the job), the scale halving, as under DDP; the runs
// then end within f16's noise of each other (the rows' reductions are grouped differently).
TEST_CASE("--amp f16 with pipelined ZeRO-3: the loss scale and skipped steps act on the shards as DDP's do") {
  const std::string dir = test::scratch_dir("gpt_pipeline_zero_f16");
  TrainConfig base = config(dir);
  base.amp = "f16";
  base.loss_scale = 524288;
  TrainConfig ddp = pipelined(base, 1, 0, dir + "/ddp.safetensors");
  ddp.ddp = true;
  const std::string ddp_log = run(4, ddp, 6, dir + "/ddp.log", "gpt_pipeline_zero_f16_ddp");
  const TrainConfig z = pipelined(base, 1, 3, dir + "/z3.safetensors");
  const std::string z_log = run(4, z, 6, dir + "/z3.log", "gpt_pipeline_zero_f16_z3");
  INFO("DDP:\n" << ddp_log << "ZeRO-3:\n" << z_log);
  const double d = weight_diff(base, ddp.save, z.save);
  MESSAGE("pipeline 2 x data 2 --amp f16: max |ZeRO-3 - DDP| = " << d);
  CHECK(d <= 5e-3);
  const std::vector<std::string> notes = scale_notes(z_log);
  CHECK(notes == scale_notes(ddp_log));
  REQUIRE(notes.size() == 6);
  CHECK(test::contains(notes.back(), "skipped)"));
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
  TrainConfig part = c;
  part.stop_after_steps = 3, part.save = dir + "/3d_part.safetensors";
  run(8, part, 3, dir + "/3d_part.log", "gpt_pipeline_zero_3d_part");
  TrainConfig resumed = part;
  resumed.stop_after_steps = 0, resumed.resume = part.save, resumed.save = dir + "/3d_resumed.safetensors";
  CHECK(test::contains(run(8, resumed, 6, dir + "/3d_resumed.log", "gpt_pipeline_zero_3d_resumed"), "resumed from"));
  CHECK(weight_diff(base, c.save, resumed.save) == 0.0);
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
