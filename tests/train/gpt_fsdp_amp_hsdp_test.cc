// The GPT trainer's FSDP with --amp and with HSDP on real ranks (127.0.0.1): `--fsdp --amp bf16`
// on 2 ranks (every unit gathered in bf16 from f32 shards, gradients reduce-scattered in f32)
// ends as close to the f32 run as the one-process `--amp bf16` run does; under `--amp f16` every
// rank skips the same overflowing steps; `--fsdp
// --hsdp-shard-size 2` on 4 ranks (2 shard groups of 2, replicated), and with `--tp 2` on 8, ends
// with one process's weights within 1e-5 (f32); a shard size that does not divide the data ranks is refused with its
// numbers.
#include <doctest/doctest.h>

#include <fstream>

#include "train/gpt_sharded.h"
#include "tests/train/gpt_sharded_util.h"

using namespace kiln;
using namespace kiln::train::gpt;
using namespace kiln::test::sharded;

TEST_CASE("--fsdp --amp bf16 on 2 ranks is as close to the f32 run as one process in bf16") {
  const std::string dir = test::scratch_dir("gpt_fsdp_amp");
  const TrainConfig base = config(dir);
  const TrainConfig f32 = layout(base, 1, 0, dir + "/f32.safetensors");
  run(1, f32, 6, dir + "/f32.log", "gpt_fsdp_amp_f32");
  TrainConfig one = layout(base, 1, 0, dir + "/one_bf16.safetensors");
  one.amp = "bf16";
  run(1, one, 6, dir + "/one_bf16.log", "gpt_fsdp_amp_one");
  TrainConfig fsdp = layout(base, 1, 3, dir + "/fsdp_bf16.safetensors");
  fsdp.amp = "bf16";
  const std::string log = run(2, fsdp, 6, dir + "/fsdp_bf16.log", "gpt_fsdp_amp_fsdp");
  INFO(log);
  CHECK(test::contains(log, "FSDP mixed precision: parameters gathered in bf16 from f32 shards, gradients "
                            "reduce-scattered in f32"));
  const double tolerance = weight_diff(base, f32.save, one.save), d = weight_diff(base, f32.save, fsdp.save);
  MESSAGE("max |bf16 - f32|: one process (--amp bf16, autocast over f32 weights) " << tolerance
          << ", --fsdp --amp bf16 on 2 ranks (bf16 gathers) " << d);
  CHECK(tolerance > 1e-4);  // the bf16 run did round
  CHECK(d <= 2 * tolerance);
}

TEST_CASE("--fsdp --amp f16 on 2 ranks: every rank skips the same overflowing steps and ends with the same scale") {
  // A first scale of 2^22 overflows the f16 gradients of the first steps, then no more; each
  // overflow lands in some rank's shard, and the skip must be every rank's.
  const std::string dir = test::scratch_dir("gpt_fsdp_f16");
  TrainConfig c = layout(config(dir), 1, 3, dir + "/f16.safetensors");
  c.amp = "f16";
  c.loss_scale = 1 << 22;
  c.max_steps = 10;
  test::require_all_ok(test::run_ranks(2, [&](int rank, int) {
    std::ofstream log(rank == 0 ? dir + "/f16.log" : std::string("/dev/null"));
    const TrainResult r = kiln::train::gpt::train(c, log);
    std::ofstream(dir + fmt::format("/rank{}", rank)) << r.skipped_steps << " " << r.loss_scale;
  }, 240, "gpt_fsdp_f16_run"));
  const std::string r0 = read(dir + "/rank0"), r1 = read(dir + "/rank1");
  INFO(read(dir + "/f16.log"));
  MESSAGE("--fsdp --amp f16 --loss-scale 2^22, 10 steps: rank 0 skipped steps and scale " << r0 << ", rank 1 " << r1);
  CHECK(r0 == r1);
  CHECK(std::stoi(r0) >= 1);
  CHECK(std::stoi(r0) < 10);  // and some steps were taken
  CHECK(test::contains(read(dir + "/f16.log"), "parameters gathered in f16"));
}

TEST_CASE("--fsdp --hsdp-shard-size 2 on 4 ranks (and with --tp 2 on 8) ends with one process's weights; a bad size names the numbers") {
  const std::string dir = test::scratch_dir("gpt_hsdp");
  const TrainConfig base = config(dir);
  const TrainConfig one = layout(base, 1, 0, dir + "/one.safetensors");
  run(1, one, 6, dir + "/one.log", "gpt_hsdp_one");
  struct Case {
    int world, tp, zero;
  };
  // 4 ranks: data 4 in 2 shard groups of 2; 8 ranks: --tp 2, each tensor rank's data group of 4
  // in 2 shard groups of 2.
  for (const Case k : {Case{4, 1, 3}, Case{4, 1, 2}, Case{8, 2, 3}}) {
    TrainConfig c = layout(base, k.tp, k.zero, dir + fmt::format("/hsdp_w{}_z{}.safetensors", k.world, k.zero));
    c.hsdp_shard_size = 2;
    const std::string log = run(k.world, c, 6, dir + "/hsdp.log", "gpt_hsdp_run");
    INFO(log);
    CHECK(test::contains(log, fmt::format("HSDP: ZeRO-{} within 2 shard group(s) of 2 rank(s), replicated", k.zero)));
    const double d = weight_diff(base, one.save, c.save);
    MESSAGE("world " << k.world << " --tp " << k.tp << " --zero " << k.zero
            << " --hsdp-shard-size 2: max |HSDP - one process| = " << d);
    CHECK(d <= 1e-5);
  }
  TrainConfig bad = layout(base, 1, 3, "");
  bad.hsdp_shard_size = 3;
  CHECK(test::contains(test::error_of([&] { sharded_layout(bad, 4); }),
                       "--hsdp-shard-size 3 does not divide the 4 data-parallel ranks (world 4 / tensor 1)"));
  bad.zero = 0, bad.ddp = true;
  CHECK(test::contains(test::error_of([&] { sharded_layout(bad, 4); }), "--hsdp-shard-size 3 shards FSDP's units"));
}
