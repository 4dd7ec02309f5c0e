// DistributedDataParallel on 2 and 3 real processes: training matches one process on the
// concatenated batch (with and without no_sync accumulation), models are checked and synced at
// construction, and unused parameters are named.
#include <doctest/doctest.h>

#include <filesystem>
#include <limits>
#include <map>
#include <set>

#include "autograd/autograd.h"
#include "core/generator.h"
#include "core/ops.h"
#include "train/distributed_checkpoint.h"
#include "distributed/data_parallel/ddp.h"
#include "distributed/backend/init.h"
#include "distributed/data_parallel/scaler_sync.h"
#include "amp/grad_scaler.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "tests/distributed/multiprocess.h"

namespace kiln {
namespace {

using test::expect;
namespace F = nn::functional;

std::shared_ptr<nn::Sequential> make_model(int64_t hidden = 32) {
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(12, hidden), std::make_shared<nn::Tanh>(), std::make_shared<nn::Linear>(hidden, hidden),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(hidden, 5)});
}

// The data of step `step`: `world` shards of `per_rank` rows; every process can make all of it.
struct Batch {
  Tensor x, y;
};
Batch global_batch(int step, int64_t rows) {
  Generator g(1000 + static_cast<uint64_t>(step));
  return {randn({rows, 12}, {}, &g), randint(0, 5, {rows}, kInt64, &g)};
}

Tensor shard(const Tensor& t, int rank, int world) {
  int64_t n = t.size(0) / world;
  return t.narrow(0, rank * n, n);
}

void expect_params_close(nn::Module& a, nn::Module& b, double tol) {
  auto pa = a.named_parameters(), pb = b.named_parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    double d = (pa[i].second - pb[i].second).abs().max().item<float>();
    expect(d <= tol, "parameter '{}' differs from single-process training by {}", pa[i].first, d);
  }
}

// Trains a DDP model and a one-process reference on the concatenated batches; `micro` > 1
// accumulates that many micro-batches per step, all but the last under no_sync().
void train_and_compare(int rank, int world, int micro) {
  auto pg = dist::init_process_group();
  manual_seed(7 + rank);  // different on every rank: DDP must copy rank 0's
  auto model = make_model();
  manual_seed(7);
  auto reference = make_model();
  dist::DDPOptions o;
  o.first_bucket_mb = 0.0005;  // three buckets even for this small model
  o.bucket_cap_mb = 0.002;
  dist::DistributedDataParallel ddp(model, pg, o);
  expect(ddp.bucket_names().size() >= 3, "expected several buckets, got {}", ddp.bucket_names().size());
  expect(ddp.bucket_names().front().front() == "4.bias", "the first bucket starts with {}, not the last parameter",
         ddp.bucket_names().front().front());
  expect_params_close(*model, *reference, 0);

  optim::SGD opt(model->parameters(), optim::SGDOptions(0.1).set_momentum(0.9));
  optim::SGD ref_opt(reference->parameters(), optim::SGDOptions(0.1).set_momentum(0.9));
  const int64_t per_rank = 6;
  for (int step = 0; step < 6; ++step) {
    opt.zero_grad();
    ref_opt.zero_grad();
    for (int m = 0; m < micro; ++m) {
      Batch b = global_batch(step * micro + m, per_rank * world);
      // The reference's loss is the mean over the whole batch; every rank's share is equal, so
      // the average of the ranks' mean gradients is the same gradient.
      F::cross_entropy(reference->forward(b.x), b.y).backward();
      if (m + 1 < micro) {
        auto guard = ddp.no_sync();
        F::cross_entropy(ddp(shard(b.x, rank, world)), shard(b.y, rank, world)).backward();
      } else {
        F::cross_entropy(ddp(shard(b.x, rank, world)), shard(b.y, rank, world)).backward();
      }
    }
    opt.step();
    ref_opt.step();
    expect(ddp.stats().buckets == static_cast<int>(ddp.bucket_names().size()), "stats count {} buckets",
           ddp.stats().buckets);
    // Overlap: every bucket but the last (which closes with the first layer's gradients, the
    // end of the graph walk) started its all-reduce while backward was still running.
    expect(ddp.stats().launched_during_backward >= ddp.stats().buckets - 1,
           "only {} of {} buckets were launched during backward", ddp.stats().launched_during_backward,
           ddp.stats().buckets);
  }
  expect_params_close(*model, *reference, 1e-5);
}

TEST_CASE("DDP on 2 ranks matches one process on the concatenated batch") {
  test::require_all_ok(test::run_ranks(2, [](int r, int w) { train_and_compare(r, w, 1); }, 120, "ddp2"));
}

TEST_CASE("DDP on 3 ranks matches one process on the concatenated batch") {
  test::require_all_ok(test::run_ranks(3, [](int r, int w) { train_and_compare(r, w, 1); }, 120, "ddp3"));
}

TEST_CASE("DDP with no_sync gradient accumulation matches one process, on 2 and 3 ranks") {
  test::require_all_ok(test::run_ranks(2, [](int r, int w) { train_and_compare(r, w, 3); }, 120, "ddp2_acc"));
  test::require_all_ok(test::run_ranks(3, [](int r, int w) { train_and_compare(r, w, 2); }, 120, "ddp3_acc"));
}

TEST_CASE("DDP without overlap (one all-reduce after backward) gives the same result") {
  test::require_all_ok(test::run_ranks(2, [](int rank, int world) {
    auto pg = dist::init_process_group();
    manual_seed(3);
    auto a = make_model();
    manual_seed(3);
    auto b = make_model();
    dist::DDPOptions no_overlap;
    no_overlap.overlap = false;
    dist::DistributedDataParallel da(a, pg), db(b, pg, no_overlap);
    expect(db.bucket_names().size() == 1, "no-overlap mode has {} buckets", db.bucket_names().size());
    Batch batch = global_batch(0, 4 * world);
    F::cross_entropy(da(shard(batch.x, rank, world)), shard(batch.y, rank, world)).backward();
    F::cross_entropy(db(shard(batch.x, rank, world)), shard(batch.y, rank, world)).backward();
    expect(db.stats().launched_during_backward == 0 && da.stats().launched_during_backward >= 1,
           "launched during backward: {} with overlap, {} without", da.stats().launched_during_backward,
           db.stats().launched_during_backward);
    auto pa = a->parameters(), pb = b->parameters();
    for (size_t i = 0; i < pa.size(); ++i)
      expect((pa[i].grad() - pb[i].grad()).abs().max().item<float>() == 0, "gradient {} differs", i);
  }, 120, "ddp_no_overlap"));
}

TEST_CASE("gradient_as_bucket_view: each .grad is its bucket's memory, and training equals the copying reducer") {
  test::require_all_ok(test::run_ranks(2, [](int rank, int world) {
    auto pg = dist::init_process_group();
    manual_seed(5);
    auto a = make_model();
    manual_seed(5);
    auto b = make_model();
    dist::DDPOptions views;
    views.first_bucket_mb = 0.0005;
    views.bucket_cap_mb = 0.002;
    dist::DDPOptions copies = views;
    copies.gradient_as_bucket_view = false;
    dist::DistributedDataParallel da(a, pg, views), db(b, pg, copies);
    optim::SGD oa(a->parameters(), optim::SGDOptions(0.1).set_momentum(0.9));
    optim::SGD ob(b->parameters(), optim::SGDOptions(0.1).set_momentum(0.9));
    auto loss = [&](dist::DistributedDataParallel& m, const Batch& batch) {
      return F::cross_entropy(m(shard(batch.x, rank, world)), shard(batch.y, rank, world));
    };
    std::map<std::string, Tensor> pa;
    for (auto& [name, p] : a->named_parameters()) pa[name] = p;
    for (int step = 0; step < 4; ++step) {
      const bool to_none = step % 2 == 0;  // zero_grad both ways: reset to none, and zeroed in place
      oa.zero_grad(to_none);
      ob.zero_grad(to_none);
      std::vector<const void*> before;
      for (auto& [name, p] : pa) before.push_back(p.grad().defined() ? p.grad().data_ptr() : nullptr);
      Batch first = global_batch(2 * step, 4 * world), second = global_batch(2 * step + 1, 4 * world);
      {
        auto ga = da.no_sync();
        auto gb = db.no_sync();
        loss(da, first).backward();
        loss(db, first).backward();
      }
      loss(da, second).backward();
      loss(db, second).backward();
      // Grads of one bucket share one storage, other buckets' differ; zeroed in place, backward
      // accumulated into the bucket itself (the same memory as before the step).
      std::set<const void*> storages;
      for (const auto& bucket : da.bucket_names()) {
        const void* s = pa.at(bucket.front()).grad().storage().get();
        expect(storages.insert(s).second, "two buckets share gradient storage");
        for (const std::string& name : bucket)
          expect(pa.at(name).grad().storage().get() == s, "the .grad of '{}' is not in its bucket", name);
      }
      size_t k = 0;
      for (auto& [name, p] : pa) {
        if (!to_none && step > 0)
          expect(p.grad().data_ptr() == before[k], "step {}: the .grad of '{}' moved", step, name);
        ++k;
      }
      oa.step();
      ob.step();
      auto na = a->named_parameters(), nb = b->named_parameters();
      for (size_t i = 0; i < na.size(); ++i) {
        expect((na[i].second.grad() - nb[i].second.grad()).abs().max().item<float>() == 0,
               "step {}: gradient of '{}' differs between bucket views and copies", step, na[i].first);
        expect((na[i].second - nb[i].second).abs().max().item<float>() == 0, "step {}: '{}' differs", step,
               na[i].first);
      }
    }
    auto nb = b->named_parameters();
    expect(nb[0].second.grad().storage() != nb[1].second.grad().storage(),
           "with copies, gradients must be separate tensors");
  }, 120, "ddp_bucket_view"));
}

TEST_CASE("DDP refuses models that differ across ranks, naming the first difference on every rank") {
  auto results = test::run_ranks(2, [](int rank, int) {
    auto pg = dist::init_process_group();
    dist::DistributedDataParallel ddp(make_model(rank == 1 ? 17 : 32), pg);
  }, 120, "ddp_mismatch");
  for (auto& r : results) CHECK(r.exit_code == 1);
  INFO(results[0].stderr_text << results[1].stderr_text);
  CHECK(results[1].stderr_text.find("rank 1's model differs from rank 0's: entry 0 is parameter '0.weight' [17, 12] "
                                    "f32 here but parameter '0.weight' [32, 12] f32 on rank 0") != std::string::npos);
  CHECK(results[0].stderr_text.find("ranks [1] hold a different model than rank 0") != std::string::npos);
}

// A model with a branch that the forward skips.
struct Branchy : nn::Module {
  std::shared_ptr<nn::Linear> used = register_module("used", std::make_shared<nn::Linear>(12, 5));
  std::shared_ptr<nn::Linear> unused = register_module("unused", std::make_shared<nn::Linear>(12, 5));
  Tensor forward(const Tensor& x) override { return used->forward(x); }
};

TEST_CASE("a parameter without a gradient is an error naming it, unless find_unused_parameters") {
  auto results = test::run_ranks(2, [](int rank, int world) {
    auto pg = dist::init_process_group();
    Batch b = global_batch(0, 4 * world);
    {
      dist::DistributedDataParallel ddp(std::make_shared<Branchy>(), pg);
      std::string msg = "no error";
      try {
        F::cross_entropy(ddp(shard(b.x, rank, world)), shard(b.y, rank, world)).backward();
      } catch (const std::exception& e) {
        msg = e.what();
      }
      expect(msg.find("parameters [\"unused.weight\", \"unused.bias\"] got no gradient") != std::string::npos,
             "got: {}", msg);
    }
    dist::DDPOptions o;
    o.find_unused_parameters = true;
    auto m = std::make_shared<Branchy>();
    dist::DistributedDataParallel ddp(m, pg, o);
    F::cross_entropy(ddp(shard(b.x, rank, world)), shard(b.y, rank, world)).backward();
    expect(m->used->weight.grad().defined(), "the used layer got no gradient");
  }, 120, "ddp_unused");
  test::require_all_ok(results);
}

TEST_CASE("DDP's forward gives every rank rank 0's buffers (batch-norm running statistics)") {
  test::require_all_ok(test::run_ranks(2, [](int rank, int) {
    auto pg = dist::init_process_group();
    auto model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Linear>(12, 6), std::make_shared<nn::BatchNorm1d>(6)});
    dist::DistributedDataParallel ddp(model, pg);
    Tensor mean = model->named_buffers()[0].second;
    {
      NoGradGuard no_grad;
      mean.fill_(rank == 0 ? 0.25 : 7.0);  // the ranks drift apart
    }
    model->eval();  // eval: the forward itself leaves the statistics alone
    ddp(randn({4, 12}));
    expect(mean.min().item<float>() == 0.25f && mean.max().item<float>() == 0.25f,
           "rank {}: running mean {} after forward, not rank 0's 0.25", rank, mean.max().item<float>());
  }, 120, "ddp_buffers"));
}

TEST_CASE("DDP is a Module with the model's own names: a Module& loop and checkpoints need not know it") {
  test::require_all_ok(test::run_ranks(2, [](int rank, int) {
    auto pg = dist::init_process_group();
    manual_seed(5 + rank);
    auto model = make_model();
    dist::DistributedDataParallel ddp(model, pg);
    nn::Module& net = ddp;
    auto mine = net.state_dict(), theirs = model->state_dict();
    expect(mine.size() == theirs.size(), "rank {}: {} keys under DDP, {} in the model", rank, mine.size(),
           theirs.size());
    for (const auto& [name, t] : theirs)
      expect(mine.count(name) && mine.at(name).data_ptr() == t.data_ptr(), "rank {}: key '{}' differs", rank, name);
    expect(net.parameters().size() == model->parameters().size(), "rank {}: parameter counts differ", rank);
    expect(net.repr() == model->repr(), "rank {}: repr {}", rank, net.repr());
    Tensor x = randn({3, 12});
    double d = (net(x) - model->forward(x)).abs().max().item<float>();
    expect(d == 0, "rank {}: DDP's forward differs from the model's by {}", rank, d);
    net.eval();
    expect(!model->is_training() && !(*model)[0]->is_training(), "rank {}: eval() did not reach the model", rank);
  }, 120, "ddp_module"));
}

TEST_CASE("checkpoints under DDP: rank 0 writes, every rank loads, a failure on one rank stops all") {
  std::string dir = test::scratch_dir("ddp_ckpt");
  test::require_all_ok(test::run_ranks(2, [dir](int rank, int) {
    auto pg = dist::init_process_group();
    manual_seed(11 + rank);
    auto model = make_model();
    dist::DistributedDataParallel ddp(model, pg);  // rank 0's weights everywhere
    optim::SGD opt(model->parameters(), optim::SGDOptions(0.1).set_momentum(0.9));
    train::TrainingState state;
    state.step = 7;
    const std::string path = dir + "/ckpt.safetensors";
    dist::save_checkpoint(*pg, path, *model, &opt, state);
    // Written once, complete, when save returns on any rank.
    expect(std::filesystem::exists(path), "rank {}: no checkpoint after save returned", rank);

    manual_seed(99 + rank);
    auto fresh = make_model();
    optim::SGD fresh_opt(fresh->parameters(), optim::SGDOptions(0.1).set_momentum(0.9));
    train::TrainingState loaded = dist::load_checkpoint(*pg, path, *fresh, &fresh_opt);
    expect(loaded.step == 7, "rank {} loaded step {}", rank, loaded.step);
    expect_params_close(*fresh, *model, 0);

    // Rank 1 cannot read its file: both ranks fail, rank 0 saying a peer failed.
    std::string bad = rank == 1 ? dir + "/missing.safetensors" : path;
    std::string msg = "no error";
    try {
      dist::load_checkpoint(*pg, bad, *fresh, &fresh_opt);
    } catch (const std::exception& e) {
      msg = e.what();
    }
    if (rank == 0)
      expect(msg.find("load_checkpoint '" + path + "': failed on 1 other rank(s)") != std::string::npos, "rank 0: {}",
             msg);
    else
      expect(msg.find("missing.safetensors") != std::string::npos, "rank 1: {}", msg);
  }, 120, "ddp_ckpt_ranks"));
}

/// Two GradScaler steps of DDP in which rank 1 overflows at step 0 only: its loss is made inf
/// before backward (`before_all_reduce`) or one of its gradients after the all-reduce. Every rank
/// must skip step 0 (weights untouched, scale halved) and take step 1.
void check_overflow_skips_everywhere(int rank, int world, bool share_flag, bool before_all_reduce) {
  auto pg = dist::init_process_group();
  manual_seed(5);
  auto model = make_model();
  dist::DistributedDataParallel ddp(model, pg);
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.1));
  amp::GradScaler scaler;
  if (share_flag) dist::share_found_inf(scaler, pg);
  Tensor before = model->parameters()[0].clone();
  Batch b = global_batch(0, 4 * world);
  const float inf = std::numeric_limits<float>::infinity();
  for (int step = 0; step < 2; ++step) {
    const bool overflow = rank == 1 && step == 0;
    opt.zero_grad();
    Tensor loss = F::cross_entropy(ddp(shard(b.x, rank, world)), shard(b.y, rank, world));
    if (overflow && before_all_reduce) loss = loss * inf;
    scaler.scale(loss).backward();
    if (overflow && !before_all_reduce) model->parameters()[2].grad().fill_(inf);
    bool stepped = scaler.step(opt);
    scaler.update();
    expect(stepped == (step == 1), "rank {} step {}: stepped={}", rank, step, stepped);
    if (step == 0)
      expect((model->parameters()[0] - before).abs().max().item<float>() == 0, "rank {} changed the weights", rank);
  }
  expect(scaler.skipped_steps() == 1, "rank {} skipped {} steps", rank, scaler.skipped_steps());
  expect(scaler.scale() == 32768.0, "rank {} scale {}", rank, scaler.scale());
}

TEST_CASE("with share_found_inf, an inf gradient on one rank skips the step on every rank") {
  // After the all-reduce only rank 1 sees the overflow: sharing the flag is what makes all skip.
  test::require_all_ok(test::run_ranks(2, [](int rank, int world) {
    check_overflow_skips_everywhere(rank, world, /*share_flag=*/true, /*before_all_reduce=*/false);
  }, 120, "ddp_scaler"));
}

TEST_CASE("without share_found_inf, DDP's all-reduce alone makes an inf on one rank a skip on every rank") {
  // Why the main job does not all-reduce the scaler's flag under plain DDP: after backward every
  // rank holds the same averaged gradients, so an overflow on one rank is seen by all of them.
  test::require_all_ok(test::run_ranks(2, [](int rank, int world) {
    check_overflow_skips_everywhere(rank, world, /*share_flag=*/false, /*before_all_reduce=*/true);
  }, 120, "ddp_scaler_synced"));
}

}  // namespace
}  // namespace kiln
