// Hybrid sharding (HSDP: FSDP within shard groups, replicated across them) on 4 real processes as
// 2 replicas x 2 shards: training matches one process on the union of the batches (within 1e-5,
// f32), each rank holds half the parameters, replicas hold the same shard, a checkpoint written
// under HSDP loads into plain FSDP; and a shard size that does not divide the ranks is refused
// with its numbers.
#include <doctest/doctest.h>

#include <filesystem>

#include "autograd/autograd.h"
#include "distributed/backend/init.h"
#include "distributed/fsdp/fsdp.h"
#include "distributed/fsdp/fsdp_checkpoint.h"
#include "optim/optim.h"
#include "tests/distributed/fsdp/fsdp_test_util.h"
#include "tests/distributed/multiprocess.h"
#include "tests/file_util.h"

namespace kiln {
namespace {

using test::expect;
namespace F = nn::functional;

void hsdp_matches_one_process(int rank, int world, dist::ShardingStrategy strategy, const std::string& ckpt) {
  dist::init_process_group();
  const dist::HsdpGroups groups = dist::hsdp_groups(2);
  expect(groups.shard->size() == 2 && groups.replicate->size() == 2 && groups.shard->rank() == rank % 2 &&
             groups.replicate->rank() == rank / 2,
         "rank {}: shard group rank {} of {}, replicate group rank {} of {}", rank, groups.shard->rank(),
         groups.shard->size(), groups.replicate->rank(), groups.replicate->size());
  manual_seed(5);
  auto reference = std::make_shared<test::FsdpNet>();
  manual_seed(5 + rank);  // HSDP takes rank 0's weights, across the replicas too
  auto model = std::make_shared<test::FsdpNet>();
  dist::FullyShardedDataParallel fsdp(model, groups.shard,
                                      {.units = {"h"}, .strategy = strategy, .replicate = groups.replicate});
  optim::AdamW ref_opt(reference->parameters(), optim::AdamOptions(1e-2));
  optim::AdamW opt(fsdp.shards(), optim::AdamOptions(1e-2));
  for (int step = 0; step < 4; ++step) {
    test::FsdpBatch whole = test::fsdp_batch(step, world), mine = test::fsdp_batch(step, world, rank);
    F::cross_entropy(reference->forward(whole.x), whole.y).backward();
    F::cross_entropy(fsdp.forward(mine.x), mine.y).backward();
    const double want = optim::clip_grad_norm_(reference->parameters(), 0.5), got = fsdp.clip_grad_norm_(0.5);
    expect(std::abs(want - got) <= 1e-5 * std::max(1.0, want), "step {}: global norm {} under HSDP, {} whole", step,
           got, want);
    ref_opt.step();
    opt.step();
    ref_opt.zero_grad();
    opt.zero_grad();
  }
  const nn::StateDict got = fsdp.full_state_dict();
  for (auto& [name, p] : reference->named_parameters()) {
    const double d = (got.at(name) - p).abs().max().item<float>();
    expect(d <= 1e-5, "rank {}: {} differs from one process by {}", rank, name, d);
  }
  // Half the parameters per rank (2 shards); the replica holds the same half, bit for bit.
  int64_t shard_numel = 0, padded = 0;
  for (const auto& u : fsdp.units()) padded += u.padded;
  for (const Tensor& s : fsdp.shards()) {
    shard_numel += s.numel();
    std::vector<Tensor> copies{empty_like(s), empty_like(s)};
    groups.replicate->allgather(copies, s.detach())->wait();
    expect((copies[0] - copies[1]).abs().max().item<float>() == 0, "rank {}: the replicas' shards differ", rank);
  }
  expect(shard_numel * 2 == padded, "rank {}: {} of {} padded elements", rank, shard_numel, padded);

  // A checkpoint under HSDP (the first replica of each shard writes) loads into plain FSDP on 4.
  dist::save_fsdp_checkpoint(ckpt, fsdp, opt);
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(ckpt)) files += e.path().extension() == ".safetensors";
  expect(files == 2, "{} shard files under HSDP 2 x 2, want 2", files);
  manual_seed(11);
  auto plain_model = std::make_shared<test::FsdpNet>();
  dist::FullyShardedDataParallel plain(plain_model, dist::default_group(), {.units = {"h"}});
  optim::AdamW plain_opt(plain.shards(), optim::AdamOptions(1e-2));
  dist::load_fsdp_checkpoint(ckpt, plain, plain_opt);
  const nn::StateDict loaded = plain.full_state_dict();
  for (auto& [name, t] : got)
    expect((loaded.at(name) - t).abs().max().item<float>() == 0, "rank {}: {} changed through the checkpoint", rank,
           name);
}

TEST_CASE("HSDP 2 x 2 on 4 ranks (full shard and shard-grad-op) matches one process within 1e-5") {
  for (auto strategy : {dist::ShardingStrategy::kFullShard, dist::ShardingStrategy::kShardGradOp}) {
    const std::string ckpt = test::scratch_dir("hsdp_ckpt") + "/ckpt";
    test::require_all_ok(test::run_ranks(4, [&](int r, int w) { hsdp_matches_one_process(r, w, strategy, ckpt); }, 180,
                                         "hsdp_2x2"));
  }
}

TEST_CASE("an HSDP shard size that does not divide the data-parallel ranks names the numbers") {
  test::require_all_ok(test::run_ranks(4, [](int, int) {
    dist::init_process_group();
    std::string error;
    try {
      dist::hsdp_groups(3);
    } catch (const Error& e) {
      error = e.what();
    }
    expect(error.find("a shard group of 3 ranks does not divide the 4 data-parallel ranks") != std::string::npos,
           "error: {}", error);
  }, 60, "hsdp_errors"));
}

}  // namespace
}  // namespace kiln
