// ZeRO stage 1 with the rest of a training step, on real processes: global-norm clipping across
// shards, GradScaler's found-inf agreed across ranks, and checkpoints (consolidated and sharded)
// that move between ZeRO and unsharded DDP runs and across world sizes.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>

#include "amp/grad_scaler.h"
#include "autograd/autograd.h"
#include "core/generator.h"
#include "core/ops.h"
#include "train/distributed_checkpoint.h"
#include "distributed/data_parallel/ddp.h"
#include "distributed/backend/init.h"
#include "distributed/data_parallel/scaler_sync.h"
#include "distributed/data_parallel/zero.h"
#include "train/zero_checkpoint.h"
#include "nn/nn.h"
#include "nn/safetensors.h"
#include "optim/optim.h"
#include "tests/distributed/multiprocess.h"
#include "tests/distributed/data_parallel/zero_test_util.h"

namespace kiln {
namespace {

using test::expect;
namespace F = nn::functional;

using test::small_buckets;

std::shared_ptr<nn::Sequential> make_model() { return test::zero_test_model(24); }

Tensor loss_at(dist::DistributedDataParallel& ddp, int step, int rank, int world) {
  Generator g(900 + static_cast<uint64_t>(step));
  const int64_t n = 5;
  Tensor x = randn({n * world, 12}, {}, &g), y = randint(0, 5, {n * world}, kInt64, &g);
  return F::cross_entropy(ddp(x.narrow(0, rank * n, n)), y.narrow(0, rank * n, n));
}

double max_param_diff(nn::Module& a, nn::Module& b) {
  auto pa = a.parameters(), pb = b.parameters();
  double d = 0;
  for (size_t i = 0; i < pa.size(); ++i) d = std::max(d, static_cast<double>((pa[i] - pb[i]).abs().max().item<float>()));
  return d;
}

void copy_params(nn::Module& from, nn::Module& to) {
  NoGradGuard no_grad;
  auto pa = from.parameters(), pb = to.parameters();
  for (size_t i = 0; i < pa.size(); ++i) pb[i].copy_(pa[i]);
}

dist::OptimizerFactory adam() { return dist::optimizer_factory<optim::Adam>(optim::AdamOptions(1e-2)); }

TEST_CASE("ZeRO-1: clipping uses the norm over all shards; an inf on one rank's shard skips the step everywhere") {
  test::require_all_ok(test::run_ranks(2, [](int rank, int world) {
    auto pg = dist::init_process_group();
    manual_seed(5);
    auto a = make_model(), b = make_model();
    dist::DistributedDataParallel ddp_a(a, pg, small_buckets()), ddp_b(b, pg, small_buckets());
    copy_params(*a, *b);
    optim::Adam plain(a->parameters(), optim::AdamOptions(1e-2));
    dist::ZeroRedundancyOptimizer zero(ddp_b, adam());
    amp::GradScalerOptions so;
    so.init_scale = 1024;
    amp::GradScaler scaler_a(so), scaler_b(so);
    dist::share_found_inf(scaler_b, pg);  // each rank sees only its shard's gradients
    for (int step = 0; step < 5; ++step) {
      scaler_a.scale(loss_at(ddp_a, step, rank, world)).backward();
      scaler_b.scale(loss_at(ddp_b, step, rank, world)).backward();
      if (step == 2) {
        NoGradGuard no_grad;
        a->parameters()[0].grad().fill_(std::numeric_limits<float>::infinity());  // every rank: DDP averages
        if (rank == 1) zero.shards()[0].grad().fill_(std::numeric_limits<float>::infinity());  // one rank only
      }
      scaler_a.unscale_(plain);
      scaler_b.unscale_(zero);
      const double na = optim::clip_grad_norm_(a->parameters(), 0.1);
      const double nb = zero.clip_grad_norm_(0.1);
      if (step != 2) {
        expect(na > 0.1, "step {}: the norm {} is too small for clipping to act", step, na);
        expect(std::abs(na - nb) <= 1e-5 * na, "step {}: ZeRO's global norm {} differs from DDP's {}", step, nb, na);
      }
      Tensor before = b->parameters()[0].clone();
      scaler_a.step(plain);
      const bool stepped = scaler_b.step(zero);
      scaler_a.update();
      scaler_b.update();
      expect(stepped == (step != 2), "rank {} step {}: stepped = {}", rank, step, stepped);
      if (step == 2)
        expect((b->parameters()[0] - before).abs().max().item<float>() == 0, "the skipped step changed weights");
      plain.zero_grad();
      zero.zero_grad();
    }
    expect(scaler_b.skipped_steps() == 1 && scaler_b.scale() == 512, "skipped {} steps, scale {}",
           scaler_b.skipped_steps(), scaler_b.scale());
    const double d = max_param_diff(*a, *b);
    expect(d <= 1e-6, "ZeRO with clipping and loss scaling differs from DDP by {}", d);
  }, 180, "zero_clip_scaler"));
}

TEST_CASE("ZeRO-1 with master weights (a bf16 model): matches DDP, and the consolidated state carries the f32 copies") {
  test::require_all_ok(test::run_ranks(2, [](int rank, int world) {
    auto pg = dist::init_process_group();
    manual_seed(21);
    auto a = make_model(), b = make_model();
    a->to(kBFloat16);
    b->to(kBFloat16);
    dist::DistributedDataParallel ddp_a(a, pg, small_buckets()), ddp_b(b, pg, small_buckets());
    copy_params(*a, *b);
    optim::Adam plain(a->parameters(), optim::AdamOptions(1e-2));  // as adam()
    plain.set_master_weights();
    dist::ZeroRedundancyOptimizer zero(ddp_b, adam());
    zero.inner().set_master_weights();
    for (int step = 0; step < 3; ++step) {
      Generator g(60 + static_cast<uint64_t>(step));
      Tensor x = randn({5 * world, 12}, {}, &g).narrow(0, 5 * rank, 5).to(kBFloat16);
      Tensor y = randint(0, 5, {5 * world}, kInt64, &g).narrow(0, 5 * rank, 5);
      F::cross_entropy(ddp_a(x).to(kFloat32), y).backward();
      F::cross_entropy(ddp_b(x).to(kFloat32), y).backward();
      plain.step();
      zero.step();
      plain.zero_grad();
      zero.zero_grad();
    }
    expect(max_param_diff(*a, *b) == 0, "bf16 parameters differ from DDP's by {}", max_param_diff(*a, *b));
    optim::StateDict cz = zero.consolidated_state_dict(), cp = plain.state_dict();
    expect(cp.count("master.0") == 1 && cz.size() == cp.size(), "{} consolidated keys, {} unsharded (master.0: {})",
           cz.size(), cp.size(), cp.count("master.0"));
    for (const auto& [key, t] : cp) {
      expect(cz.count(key) == 1, "consolidated state lacks '{}'", key);
      expect((cz.at(key).to(kFloat64) - t.to(kFloat64)).abs().max().item<double>() <= 1e-6, "'{}' differs", key);
    }
    // Back into a ZeRO run: the same state comes out again.
    manual_seed(99);
    auto c = make_model();
    c->to(kBFloat16);
    dist::DistributedDataParallel ddp_c(c, pg, small_buckets());
    dist::ZeroRedundancyOptimizer again(ddp_c, adam());
    again.inner().set_master_weights();
    again.load_consolidated_state_dict(cz);
    optim::StateDict round = again.consolidated_state_dict();
    for (const auto& [key, t] : cz)
      expect((round.at(key).to(kFloat64) - t.to(kFloat64)).abs().max().item<double>() == 0, "'{}' changed", key);
  }, 180, "zero_master"));
}

std::string g_dir;  // checkpoint files, shared by the ranks of each run

// Two steps of training from `step`.
void train(dist::DistributedDataParallel& ddp, optim::Optimizer& opt, int from, int rank, int world) {
  for (int step = from; step < from + 2; ++step) {
    loss_at(ddp, step, rank, world).backward();
    opt.step();
    opt.zero_grad();
  }
}

TEST_CASE("ZeRO-1 checkpoints: consolidated and sharded, into ZeRO and unsharded runs, and across world sizes") {
  g_dir = test::scratch_dir("zero_checkpoint_files");
  test::require_all_ok(test::run_ranks(2, [](int rank, int world) {
    auto pg = dist::init_process_group();
    const std::string cons = g_dir + "/consolidated.ckpt", shard = g_dir + "/sharded.ckpt",
                      plain_path = g_dir + "/plain.ckpt";
    manual_seed(9);
    auto z = make_model(), p = make_model();
    dist::DistributedDataParallel ddp_z(z, pg, small_buckets()), ddp_p(p, pg, small_buckets());
    copy_params(*z, *p);
    dist::ZeroRedundancyOptimizer zero(ddp_z, adam());
    optim::Adam plain(p->parameters(), optim::AdamOptions(1e-2));
    train(ddp_z, zero, 0, rank, world);
    train(ddp_p, plain, 0, rank, world);

    // The consolidated state is the unsharded optimizer's, key for key.
    optim::StateDict cz = zero.consolidated_state_dict(), cp = plain.state_dict();
    expect(cz.size() == cp.size(), "consolidated state has {} keys, the unsharded optimizer's {}", cz.size(), cp.size());
    for (const auto& [key, t] : cp) {
      expect(cz.count(key) == 1, "consolidated state lacks '{}'", key);
      double d = (cz.at(key).to(kFloat64) - t.to(kFloat64)).abs().max().item<double>();
      expect(d <= 1e-6, "'{}' differs from the unsharded state by {}", key, d);
    }
    std::string msg;
    try {
      (void)zero.state_dict();
    } catch (const Error& e) {
      msg = e.what();
    }
    expect(msg.find("ZeroRedundancyOptimizer(Adam).state_dict: this rank holds only its shard") != std::string::npos,
           "got: {}", msg);

    train::TrainingState st;
    st.step = 2;
    dist::save_zero_checkpoint(cons, *z, zero, st, dist::ZeroCheckpointKind::kConsolidated);
    dist::save_zero_checkpoint(shard, *z, zero, st, dist::ZeroCheckpointKind::kSharded);
    dist::save_checkpoint(*pg, plain_path, *p, &plain, st);
    expect(std::filesystem::exists(dist::zero_shard_path(shard, rank, world)), "no shard file for rank {}", rank);
    train(ddp_z, zero, 2, rank, world);  // the uninterrupted run

    auto resume = [&](const std::string& what, const std::function<void(nn::Module&, dist::DistributedDataParallel&)>& go) {
      manual_seed(100 + rank);  // a different start, so the load has to do the work
      auto m = make_model();
      dist::DistributedDataParallel ddp(m, pg, small_buckets());
      go(*m, ddp);
      const double d = max_param_diff(*m, *z);
      expect(d <= 1e-6, "{}: resumed training differs from the uninterrupted run by {}", what, d);
    };
    resume("consolidated -> unsharded Adam", [&](nn::Module& m, dist::DistributedDataParallel& ddp) {
      optim::Adam opt(m.parameters(), optim::AdamOptions(1e-2));
      expect(dist::load_checkpoint(*pg, cons, m, &opt).step == 2, "step not restored");
      train(ddp, opt, 2, rank, world);
    });
    resume("consolidated -> ZeRO", [&](nn::Module& m, dist::DistributedDataParallel& ddp) {
      dist::ZeroRedundancyOptimizer opt(ddp, adam());
      expect(dist::load_zero_checkpoint(cons, m, opt).step == 2, "step not restored");
      train(ddp, opt, 2, rank, world);
    });
    resume("sharded -> ZeRO", [&](nn::Module& m, dist::DistributedDataParallel& ddp) {
      dist::ZeroRedundancyOptimizer opt(ddp, adam());
      train::TrainingState got = dist::load_zero_checkpoint(shard, m, opt);
      expect(got.step == 2 && got.extra.empty(), "step {} / {} extra keys restored", got.step, got.extra.size());
      train(ddp, opt, 2, rank, world);
    });
    resume("unsharded DDP checkpoint -> ZeRO", [&](nn::Module& m, dist::DistributedDataParallel& ddp) {
      dist::ZeroRedundancyOptimizer opt(ddp, adam());
      dist::load_zero_checkpoint(plain_path, m, opt);
      train(ddp, opt, 2, rank, world);
    });
  }, 240, "zero_ckpt2"));

  // The consolidated file loads into 3 ranks; the 2-rank sharded one is refused, naming both sizes.
  test::require_all_ok(test::run_ranks(3, [](int rank, int world) {
    auto pg = dist::init_process_group();
    manual_seed(1);
    auto m = make_model();
    dist::DistributedDataParallel ddp(m, pg, small_buckets());
    dist::ZeroRedundancyOptimizer opt(ddp, adam());
    std::string msg;
    try {
      dist::load_zero_checkpoint(g_dir + "/sharded.ckpt", *m, opt);
    } catch (const Error& e) {
      msg = e.what();
    }
    expect(msg.find("was saved sharded over 2 ranks; this run has 3") != std::string::npos, "got: {}", msg);
    dist::load_zero_checkpoint(g_dir + "/consolidated.ckpt", *m, opt);
    nn::SafetensorsContents file = nn::load_safetensors(g_dir + "/consolidated.ckpt");
    optim::StateDict back = opt.consolidated_state_dict();
    for (const auto& [key, t] : file.tensors) {
      if (key.rfind("optim.", 0) != 0) continue;
      const Tensor& got = back.at(key.substr(6));
      expect((got.to(kFloat64) - t.to(kFloat64)).abs().max().item<double>() == 0, "'{}' changed in the round trip", key);
    }
    train(ddp, opt, 2, rank, world);
  }, 240, "zero_ckpt3"));
}

}  // namespace
}  // namespace kiln
