// FSDP's mixed precision (FsdpOptions::param_dtype / reduce_dtype, as FSDP2's MixedPrecisionPolicy)
// on real processes: units gathered in bf16 from f32 shards (reduce-scatter in f32, or in bf16)
// end as close to the f32 run as the one-process bf16 run (a bf16 model with f32 master weights)
// does; and under f16 an overflow in one rank's gradient, which the reduce-scatter hands to one
// shard only, skips the step on every rank once the loss scaler's flag is shared (and, as a
// control, on that shard's rank alone if it is not).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "amp/amp.h"
#include "autograd/autograd.h"
#include "distributed/backend/init.h"
#include "distributed/data_parallel/scaler_sync.h"
#include "distributed/fsdp/fsdp.h"
#include "optim/optim.h"
#include "tests/distributed/fsdp/fsdp_test_util.h"
#include "tests/distributed/multiprocess.h"

namespace kiln {
namespace {

using test::expect;
namespace F = nn::functional;

double max_diff(const nn::StateDict& a, const nn::Module& b) {
  double d = 0;
  for (auto& [name, p] : b.named_parameters())
    d = std::max(d, static_cast<double>((a.at(name).to(kFloat32) - p.to(kFloat32)).abs().max().item<float>()));
  return d;
}

void bf16_within_one_process_tolerance(int rank, int world, DType reduce) {
  auto pg = dist::init_process_group();
  manual_seed(5);
  auto f32 = std::make_shared<test::FsdpNet>();
  manual_seed(5);
  auto bf16 = std::make_shared<test::FsdpNet>();
  bf16->to(kBFloat16);  // one process in bf16: a bf16 model, f32 master weights in the optimizer
  manual_seed(5);
  auto model = std::make_shared<test::FsdpNet>();
  dist::FullyShardedDataParallel fsdp(model, pg, {.units = {"h"}, .param_dtype = kBFloat16, .reduce_dtype = reduce});
  optim::AdamW opt_f32(f32->parameters(), optim::AdamOptions(1e-2));
  optim::AdamW opt_bf16(bf16->parameters(), optim::AdamOptions(1e-2));
  opt_bf16.set_master_weights();
  optim::AdamW opt(fsdp.shards(), optim::AdamOptions(1e-2));
  for (int step = 0; step < 4; ++step) {
    test::FsdpBatch whole = test::fsdp_batch(step, world), mine = test::fsdp_batch(step, world, rank);
    F::cross_entropy(f32->forward(whole.x), whole.y).backward();
    {
      amp::AutocastGuard autocast(kBFloat16);
      F::cross_entropy(bf16->forward(whole.x), whole.y).backward();
    }
    Tensor out;
    {
      amp::AutocastGuard autocast(kBFloat16);
      out = fsdp.forward(mine.x);
    }
    // The root stays gathered until backward: in bf16, 2 bytes an element.
    expect(fsdp.gathered_bytes() == fsdp.units()[0].padded * 2, "after forward {} bytes gathered, want the root's {} in bf16",
           fsdp.gathered_bytes(), fsdp.units()[0].padded * 2);
    expect(out.dtype() == kBFloat16 && model->head->weight.dtype() == kBFloat16, "forward in {}, weights {}",
           out.dtype(), model->head->weight.dtype());
    F::cross_entropy(out, mine.y).backward();
    for (const Tensor& s : fsdp.shards())
      expect(s.dtype() == kFloat32 && s.grad().dtype() == kFloat32, "a shard is {} with a {} gradient", s.dtype(),
             s.grad().dtype());
    for (optim::Optimizer* o : {static_cast<optim::Optimizer*>(&opt_f32), static_cast<optim::Optimizer*>(&opt_bf16),
                                static_cast<optim::Optimizer*>(&opt)}) {
      o->step();
      o->zero_grad();
    }
  }
  const nn::StateDict got = fsdp.full_state_dict();
  nn::StateDict one_bf16;
  for (auto& [name, p] : bf16->named_parameters()) one_bf16[name] = p;
  const double tolerance = max_diff(one_bf16, *f32), d = max_diff(got, *f32);
  if (rank == 0)
    MESSAGE(world << " ranks, reduce-scatter in " << dtype_name(reduce) << ": max |bf16 - f32| one process "
                  << tolerance << ", FSDP gathering in bf16 " << d);
  // The one process rounds its weights to bf16 after every step; FSDP keeps f32 shards and
  // rounds only the gathered copy, so it may come closer, never much further.
  expect(tolerance > 1e-4, "the one-process bf16 run is {} from f32: it did not run in bf16", tolerance);
  expect(d <= 1.5 * tolerance, "FSDP in bf16 is {} from the f32 run, the one-process bf16 run {}", d, tolerance);
}

TEST_CASE("FSDP gathering in bf16 (f32 shards; reduce-scatter in f32 or bf16) is as close to f32 as one bf16 process, on 2 and 4 ranks") {
  for (DType reduce : {kFloat32, kBFloat16})
    for (int n : {2, 4})
      test::require_all_ok(test::run_ranks(n, [reduce](int r, int w) { bf16_within_one_process_tolerance(r, w, reduce); },
                                           180, "fsdp_mp_bf16_" + std::to_string(n)));
}

/// f16 gathers, f32 reduce-scatter, a dynamic loss scale. Step 0 is clean. In step 1 rank 0's
/// gradient of head.bias (the root unit's last parameter, which the last rank's shard holds)
/// overflows; the reduce-scatter hands the inf to that shard only.
void f16_overflow(int rank, int world, bool share) {
  auto pg = dist::init_process_group();
  manual_seed(5);
  auto model = std::make_shared<test::FsdpNet>();
  dist::FullyShardedDataParallel fsdp(model, pg, {.units = {"h"}, .param_dtype = kFloat16, .reduce_dtype = kFloat32});
  const auto root = fsdp.units()[0];
  expect(root.names.back() == "head.bias" && root.numel - 4 >= root.padded / world * (world - 1),
         "head.bias ({} of the root's {} elements) is not in the last rank's shard", root.names.back(), root.numel);
  optim::AdamW opt(fsdp.shards(), optim::AdamOptions(1e-2));
  amp::GradScaler scaler({.init_scale = 1024});
  if (share) dist::share_found_inf(scaler, pg);
  bool poison = false;
  model->head->bias.register_hook([&poison, rank](const Tensor& g) {
    if (!poison || rank != 0) return g;
    return full(g.sizes(), std::numeric_limits<double>::infinity(), TensorOptions().dtype(g.dtype()));
  });
  for (int step = 0; step < 2; ++step) {
    poison = step == 1;
    std::vector<Tensor> before;
    for (const Tensor& s : fsdp.shards()) before.push_back(s.detach().clone());
    test::FsdpBatch mine = test::fsdp_batch(step, world, rank);
    Tensor loss;
    {
      amp::AutocastGuard autocast(kFloat16);
      Tensor out = fsdp.forward(mine.x);
      expect(out.dtype() == kFloat16, "forward in {}", out.dtype());
      loss = F::cross_entropy(out, mine.y);
    }
    scaler.scale(loss).backward();
    const bool stepped = scaler.step(opt);
    scaler.update();
    opt.zero_grad();
    double moved = 0;
    for (size_t u = 0; u < before.size(); ++u)
      moved = std::max(moved, static_cast<double>((fsdp.shards()[u].detach() - before[u]).abs().max().item<float>()));
    // Without the shared flag only the last rank, whose shard holds the inf, skips.
    const bool skip = step == 1 && (share || rank == world - 1);
    expect(stepped == !skip && (moved == 0) == skip, "rank {} step {}: stepped {}, shards moved by {} (want a {})",
           rank, step, stepped, moved, skip ? "skip" : "step");
    expect(scaler.scale() == (skip ? 512.0 : 1024.0), "rank {} step {}: scale {}", rank, step, scaler.scale());
  }
}

TEST_CASE("FSDP in f16: one rank's overflow skips the step on every rank (weights unchanged, scale halved everywhere)") {
  test::require_all_ok(test::run_ranks(2, [](int r, int w) { f16_overflow(r, w, /*share=*/true); }, 120, "fsdp_mp_f16"));
}

TEST_CASE("FSDP in f16 without the shared flag: only the rank whose shard holds the overflow skips") {
  test::require_all_ok(test::run_ranks(2, [](int r, int w) { f16_overflow(r, w, /*share=*/false); }, 120,
                                       "fsdp_mp_f16_unshared"));
}

TEST_CASE("FSDP mixed-precision options that cannot work name the dtype") {
  test::require_all_ok(test::run_ranks(2, [](int, int) {
    auto pg = dist::init_process_group();
    std::string bad_param, bad_reduce;
    try {
      dist::FullyShardedDataParallel f(std::make_shared<test::FsdpNet>(), pg, {.units = {"h"}, .param_dtype = kInt64});
    } catch (const Error& e) {
      bad_param = e.what();
    }
    try {
      dist::FullyShardedDataParallel f(std::make_shared<test::FsdpNet>(), pg,
                                       {.units = {"h"}, .param_dtype = kBFloat16, .reduce_dtype = kFloat16});
    } catch (const Error& e) {
      bad_reduce = e.what();
    }
    expect(bad_param.find("param_dtype i64") != std::string::npos, "error: {}", bad_param);
    expect(bad_reduce.find("reduce_dtype f16 must be f32 or the param_dtype bf16") != std::string::npos, "error: {}",
           bad_reduce);
  }, 60, "fsdp_mp_errors"));
}

}  // namespace
}  // namespace kiln
