// FSDP checkpoints across world sizes: 2 ranks train 2 steps and save sharded (and consolidated);
// 3 ranks load that (and the reverse, 3 -> 2), train 2 more steps, and end where one process
// training on the same batches for 4 steps ends (parameters and AdamW's moments resharded). The
// consolidated file loads into a plain model. A missing shard is named. The by-name views of the
// shards (gather_by_name, shard_by_name, shard_masks) round-trip.
#include <doctest/doctest.h>

#include <filesystem>

#include "distributed/fsdp/fsdp_checkpoint.h"
#include "distributed/backend/init.h"
#include "nn/safetensors.h"
#include "optim/optim.h"
#include "tests/distributed/fsdp/fsdp_test_util.h"
#include "tests/distributed/multiprocess.h"

namespace kiln {
namespace {

using test::expect;
namespace F = nn::functional;

/// One process over the same batches: steps [0, 2) as `first` ranks cut them, then [2, 4) as `second`.
std::shared_ptr<test::FsdpNet> reference(int first, int second) {
  manual_seed(5);
  auto m = std::make_shared<test::FsdpNet>();
  optim::AdamW opt(m->parameters(), optim::AdamOptions(1e-2));
  for (int step = 0; step < 4; ++step) {
    test::FsdpBatch b = test::fsdp_batch(step, step < 2 ? first : second);
    F::cross_entropy(m->forward(b.x), b.y).backward();
    opt.step();
    opt.zero_grad();
  }
  return m;
}

void train(dist::FullyShardedDataParallel& fsdp, optim::Optimizer& opt, int from, int to, int rank, int world) {
  for (int step = from; step < to; ++step) {
    test::FsdpBatch b = test::fsdp_batch(step, world, rank);
    F::cross_entropy(fsdp.forward(b.x), b.y).backward();
    opt.step();
    opt.zero_grad();
  }
}

void first_half(int rank, int world, const std::string& dir) {
  auto pg = dist::init_process_group();
  manual_seed(5);
  dist::FullyShardedDataParallel fsdp(std::make_shared<test::FsdpNet>(), pg, {.units = {"h"}});
  optim::AdamW opt(fsdp.shards(), optim::AdamOptions(1e-2));
  train(fsdp, opt, 0, 2, rank, world);
  dist::save_fsdp_checkpoint(dir, fsdp, opt);
  dist::save_consolidated(dir + "/consolidated.safetensors", fsdp);
  // The consolidated file holds what the shards hold, in one-process names.
  nn::StateDict whole = fsdp.full_state_dict();
  test::FsdpNet plain;
  plain.load_state_dict(nn::load_safetensors(dir + "/consolidated.safetensors").tensors);
  for (auto& [name, p] : plain.named_parameters())
    expect((p - whole.at(name)).abs().max().item<float>() == 0, "consolidated {} differs", name);
}

void second_half(int rank, int world, const std::string& dir, int first_world) {
  auto pg = dist::init_process_group();
  manual_seed(77);  // other weights: the checkpoint must replace them all
  dist::FullyShardedDataParallel fsdp(std::make_shared<test::FsdpNet>(), pg, {.units = {"h"}});
  optim::AdamW opt(fsdp.shards(), optim::AdamOptions(1e-2));
  dist::load_fsdp_checkpoint(dir, fsdp, opt);
  train(fsdp, opt, 2, 4, rank, world);
  auto ref = reference(first_world, world);
  nn::StateDict got = fsdp.full_state_dict();
  for (auto& [name, p] : ref->named_parameters()) {
    const double d = (got.at(name) - p).abs().max().item<float>();
    expect(d <= 2e-5, "{} -> {} ranks: {} differs from one process by {}", first_world, world, name, d);
  }
}

TEST_CASE("an FSDP checkpoint written by 2 ranks resumes on 3, and one by 3 on 2") {
  for (auto [a, b] : {std::pair{2, 3}, std::pair{3, 2}}) {
    const std::string dir = test::scratch_dir("fsdp_ckpt_" + std::to_string(a) + std::to_string(b));
    test::require_all_ok(test::run_ranks(a, [&](int r, int w) { first_half(r, w, dir); }, 120, "fsdp_save"));
    test::require_all_ok(test::run_ranks(b, [&](int r, int w) { second_half(r, w, dir, a); }, 120, "fsdp_load"));
  }
}

TEST_CASE("gather_by_name, shard_by_name and shard_masks map FSDP's flat shards to parameters and back (3 ranks)") {
  test::require_all_ok(test::run_ranks(3, [](int rank, int world) {
    auto pg = dist::init_process_group();
    manual_seed(5);
    auto net = std::make_shared<test::FsdpNet>();
    nn::StateDict want;
    for (auto& [name, p] : net->named_parameters()) want[name] = p.detach().clone();
    dist::FullyShardedDataParallel fsdp(net, pg, {.units = {"h"}});
    const nn::StateDict got = fsdp.gather_by_name(fsdp.shards());
    expect(got.size() == want.size(), "{} names gathered, {} parameters", got.size(), want.size());
    for (auto& [name, w] : want)
      expect((got.at(name) - w).abs().max().item<float>() == 0, "gathered {} differs from the model's", name);
    const std::vector<Tensor> back = fsdp.shard_by_name(want), shards = fsdp.shards();
    for (size_t u = 0; u < shards.size(); ++u)
      expect((back[u] - shards[u].detach()).abs().max().item<float>() == 0, "rank {}: unit {}'s shard differs", rank, u);
    // A mask: 1 over the biases, 0 over the weights and the padding.
    const std::vector<Tensor> masks = fsdp.shard_masks([](const std::string& name) { return name.ends_with(".bias") ? 1.0 : 0.0; });
    int64_t biases = 0;
    for (auto& [name, m] : fsdp.gather_by_name(masks)) {
      const float v = name.ends_with(".bias") ? 1.f : 0.f;
      expect((m - v).abs().max().item<float>() == 0, "mask of {} is not {}", name, v);
      if (v == 1.f) biases += m.numel();
    }
    double mine = 0;
    for (const Tensor& m : masks) mine += m.sum().item<double>();
    Tensor total = full({1}, mine, TensorOptions().dtype(kFloat64));
    pg->allreduce(total)->wait();
    expect(total.item<double>() == static_cast<double>(biases), "the masks hold {} ones over {} ranks, the biases {} "
           "elements (padding must be 0)", total.item<double>(), world, biases);
    nn::StateDict missing = want;
    missing.erase("h.0.fc.weight");
    std::string error;
    try {
      fsdp.shard_by_name(missing);
    } catch (const Error& e) {
      error = e.what();
    }
    expect(error.find("missing 'h.0.fc.weight'") != std::string::npos, "error: '{}'", error);
  }, 120, "fsdp_by_name"));
}

TEST_CASE("a missing FSDP shard file is named") {
  const std::string dir = test::scratch_dir("fsdp_ckpt_missing");
  test::require_all_ok(test::run_ranks(2, [&](int r, int w) { first_half(r, w, dir); }, 120, "fsdp_save_m"));
  std::filesystem::remove(dir + "/shard-00001-of-00002.safetensors");
  test::require_all_ok(test::run_ranks(2, [&](int, int) {
    auto pg = dist::init_process_group();
    dist::FullyShardedDataParallel fsdp(std::make_shared<test::FsdpNet>(), pg, {.units = {"h"}});
    optim::AdamW opt(fsdp.shards(), optim::AdamOptions(1e-2));
    bool named = false;
    try {
      dist::load_fsdp_checkpoint(dir, fsdp, opt);
    } catch (const Error& e) {
      named = std::string(e.what()).find("shard-00001-of-00002.safetensors' is missing") != std::string::npos;
    }
    expect(named, "the missing shard was not named");
  }, 60, "fsdp_missing"));
}

}  // namespace
}  // namespace kiln
