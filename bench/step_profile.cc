// Per-rank compute profiles, timed while the other ranks compute too (see step_profile.h).
#include "bench/step_profile.h"

#include <time.h>

#include <algorithm>
#include <map>

#include "bench/timing.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/ops.h"
#include "distributed/data_parallel/ddp.h"
#include "models/mlp_cnn.h"
#include "nn/functional.h"
#include "optim/sgd.h"

namespace kiln::bench {
namespace {

/// CPU seconds of this process (every thread).
double cpu_now_s() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

std::shared_ptr<nn::Module> make(const std::string& name) {
  return name == "wide_mlp" ? std::shared_ptr<nn::Module>(models::make_wide_mlp(2048))
                            : std::shared_ptr<nn::Module>(models::make_model(name));
}

}  // namespace

StepProfile profile_compute(const std::string& name, const std::shared_ptr<dist::ProcessGroup>& pg, int steps) {
  manual_seed(0);
  auto model = make(name);
  std::vector<std::vector<std::string>> buckets;
  {
    dist::DistributedDataParallel ddp(model, pg);
    buckets = ddp.bucket_names();
  }
  std::map<std::string, size_t> param_index;
  std::vector<Tensor> params;
  for (auto& [pname, p] : model->named_parameters()) {
    param_index[pname] = params.size();
    params.push_back(p);
  }
  std::vector<double> ready(params.size(), 0);
  for (size_t i = 0; i < params.size(); ++i)
    params[i].register_post_accumulate_grad_hook([&ready, i](const Tensor&) { ready[i] = now_s(); });
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.01).set_momentum(0.9));
  Tensor x = randn({128, 1, 28, 28});
  Tensor y = randint(0, 10, {128});
  std::vector<double> fwd, bwd, upd, cpu;
  std::vector<std::vector<double>> bucket_ready(buckets.size());
  for (int s = 0; s < steps + 1; ++s) {
    pg->barrier()->wait();
    opt.zero_grad();
    const double c0 = cpu_now_s();
    double t0 = now_s();
    Tensor loss = nn::functional::cross_entropy((*model)(x), y);
    double t1 = now_s();
    loss.backward();
    double t2 = now_s();
    opt.step();
    double t3 = now_s();
    const double c1 = cpu_now_s();
    if (s == 0) continue;  // warm-up
    cpu.push_back(c1 - c0);
    fwd.push_back(t1 - t0);
    bwd.push_back(t2 - t1);
    upd.push_back(t3 - t2);
    for (size_t b = 0; b < buckets.size(); ++b) {
      double last = t1;
      for (auto& pname : buckets[b]) last = std::max(last, ready[param_index.at(pname)]);
      bucket_ready[b].push_back(last - t1);
    }
  }
  StepProfile p{median(fwd), median(bwd), median(upd), {}, median(cpu)};
  for (size_t b = 0; b < buckets.size(); ++b) {
    double bytes = 0;
    for (auto& pname : buckets[b]) bytes += static_cast<double>(params[param_index.at(pname)].numel()) * 4;
    p.buckets.push_back({median(bucket_ready[b]), bytes});
  }
  return p;
}

StepProfile median_profile(const std::vector<StepProfile>& ps) {
  KILN_CHECK(!ps.empty(), "median_profile: no profiles");
  auto med = [&](auto get) {
    std::vector<double> v;
    for (const StepProfile& p : ps) v.push_back(get(p));
    return median(v);
  };
  StepProfile out = ps[0];
  out.forward_s = med([](const StepProfile& p) { return p.forward_s; });
  out.backward_s = med([](const StepProfile& p) { return p.backward_s; });
  out.optimizer_s = med([](const StepProfile& p) { return p.optimizer_s; });
  out.cpu_s = med([](const StepProfile& p) { return p.cpu_s; });
  for (size_t b = 0; b < out.buckets.size(); ++b)
    out.buckets[b].ready_s = med([&](const StepProfile& p) { return p.buckets.at(b).ready_s; });
  return out;
}

StepProfile slowest_rank(const StepProfile& mine, dist::ProcessGroup& pg) {
  std::vector<double> v{mine.forward_s, mine.backward_s, mine.optimizer_s, mine.cpu_s};
  for (const BucketTiming& b : mine.buckets) v.push_back(b.ready_s);
  Tensor t = tensor(v, {static_cast<int64_t>(v.size())});
  pg.allreduce(t, dist::ReduceOp::kMax)->wait();
  v = t.to_vector<double>();
  StepProfile out = mine;
  out.forward_s = v[0], out.backward_s = v[1], out.optimizer_s = v[2], out.cpu_s = v[3];
  for (size_t b = 0; b < out.buckets.size(); ++b) out.buckets[b].ready_s = v[4 + b];
  return out;
}

nlohmann::ordered_json to_json(const StepProfile& p) {
  nlohmann::ordered_json buckets = nlohmann::ordered_json::array();
  for (const BucketTiming& b : p.buckets) buckets.push_back({{"ready_ms", b.ready_s * 1e3}, {"bytes", b.bytes}});
  return {{"forward_ms", p.forward_s * 1e3}, {"backward_ms", p.backward_s * 1e3},
          {"optimizer_ms", p.optimizer_s * 1e3}, {"cpu_ms", p.cpu_s * 1e3}, {"buckets", buckets}};
}

StepProfile step_profile_from_json(const nlohmann::json& j) {
  try {
    StepProfile p{j.at("forward_ms").get<double>() / 1e3, j.at("backward_ms").get<double>() / 1e3,
                  j.at("optimizer_ms").get<double>() / 1e3, {}};
    for (const auto& b : j.at("buckets")) p.buckets.push_back({b.at("ready_ms").get<double>() / 1e3, b.at("bytes")});
    p.cpu_s = j.value("cpu_ms", 0.0) / 1e3;
    return p;
  } catch (const nlohmann::json::exception& e) {
    fail("a compute profile: {}", e.what());
  }
}

}  // namespace kiln::bench
