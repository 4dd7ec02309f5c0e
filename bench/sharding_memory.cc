// Memory per rank of the GPT trainer's sharding strategies, measured beside their formulas
// (bench/sharding_memory_math.h): DDP, ZeRO-1, ZeRO-2, ZeRO-3 (FSDP) and tensor parallel, each
// on N real processes (127.0.0.1, Gloo, one thread each), built as `gpt --ddp [--zero K | --tp N]`
// builds them (train/gpt_sharded.h). Each rank counts the bytes of the CPU tensors it holds
// (CpuMemoryTracker, the allocator's view) after the first step, by what holds them:
//   params  the storages of the model's parameters (TP: this rank's shards; FSDP: its flat
//           shards, the gathered buffers being freed), and ZeRO-1's f32 shards;
//   grads   the storages of their gradients (DDP's buckets, of which the gradients are views);
//   state   what the optimizer step added (AdamW's moments, created by the first step);
//   other   the rest of what is live (buffers of the implementation);
//   peak    the most held during the second step (forward, backward, clipping, step).
// The largest rank's figure is printed beside the formula. Memory does not depend on load: no
// timing is reported and nothing refuses a busy machine.
//   tools/bazel run //bench:sharding_memory [-- --model d12 --seq-len 64 --nproc 2,4 --strategies ddp,zero3]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <unistd.h>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench/host_check.h"
#include "bench/sharding_memory_math.h"
#include "core/generator.h"
#include "core/memory/memory_tracker.h"
#include "core/ops.h"
#include "core/parallel.h"
#include "core/util/cli.h"
#include "distributed/backend/init.h"
#include "distributed/data_parallel/zero.h"
#include "distributed/launch/local_ranks.h"
#include "models/gpt_model.h"
#include "train/gpt_sharded.h"

using namespace kiln;
using bench::Sharding;

namespace {

struct Options {
  std::string model = "d12";
  int64_t seq_len = 64, batch = 1;
};

/// Every rank's value, on every rank.
std::vector<double> gather(dist::ProcessGroup& pg, double v) {
  Tensor all = zeros({pg.size()}, dtype(kFloat64));
  pg.allgather_into_tensor(all, full({1}, v, dtype(kFloat64)))->wait();
  return all.to_vector<double>();
}

double max_of(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }

/// The bytes of the storages behind `tensors`, each counted once.
double storage_bytes(const std::vector<Tensor>& tensors) {
  std::set<const void*> seen;
  double bytes = 0;
  for (const Tensor& t : tensors)
    if (t.defined() && seen.insert(t.storage().get()).second) bytes += static_cast<double>(t.storage()->nbytes());
  return bytes;
}

train::gpt::TrainConfig config_for(Sharding s, const Options& o) {
  train::gpt::TrainConfig c;
  c.model = o.model;
  c.gpt = models::gpt::named_config(o.model, 256);
  c.batch_size = o.batch;
  c.seq_len = o.seq_len;
  c.ddp = true;
  c.zero = s == Sharding::kZero1 ? 1 : s == Sharding::kZero2 ? 2 : s == Sharding::kZero3 ? 3 : 0;
  return c;
}

/// One rank of one strategy: builds, runs two steps, and (rank 0) appends its JSON row to `rows`.
void run_rank(Sharding s, const Options& o, const std::string& rows) {
  set_num_threads(1);
  CpuMemoryTracker tracker;  // before the process group's threads exist
  auto pg = dist::init_process_group();
  const int n = pg->size();
  train::gpt::TrainConfig c = config_for(s, o);
  c.tp = s == Sharding::kTensorParallel ? n : 1;
  const size_t base = tracker.live_bytes();

  // The model as the trainers build it (gpt_sharded_trainer.cc, gpt_trainer.cc for ZeRO-1).
  train::gpt::ShardedGPT m;
  const dist::ParallelLayout layout = train::gpt::sharded_layout(c, n);
  m.groups = dist::make_groups(layout);
  manual_seed(c.seed);
  auto whole = std::make_shared<models::gpt::GPT>(c.gpt);
  bench::ParamCount count;
  for (const auto& [name, p] : whole->named_parameters()) {
    count.total += static_cast<double>(p.numel());
    if (models::gpt::parameter_split(name).dim >= 0) count.split += static_cast<double>(p.numel());
  }
  train::gpt::wrap_sharded(m, c, layout, std::move(whole));
  std::vector<double> units;
  if (m.fsdp)
    for (const auto& u : m.fsdp->units()) units.push_back(static_cast<double>(u.numel));
  std::unique_ptr<optim::Optimizer> opt;
  dist::ZeroRedundancyOptimizer* zero = nullptr;
  if (c.zero == 1) {
    auto z = std::make_unique<dist::ZeroRedundancyOptimizer>(
        *m.ddp, train::gpt::param_groups(c, m.whole->named_parameters()),
        dist::optimizer_factory<optim::AdamW>(train::gpt::adam_options(c)));
    zero = z.get();
    opt = std::move(z);
  } else {
    opt = train::gpt::make_sharded_optimizer(c, m);
  }
  // The tensors a kind of state lives in, each storage counted once (DDP's gradients are views
  // of its buckets; FSDP's parameters views of buffers freed between uses).
  auto weight_tensors = [&] {
    std::vector<Tensor> t = m.model().parameters();
    if (m.fsdp)
      for (const Tensor& x : m.fsdp->shards()) t.push_back(x);
    if (zero)
      for (const Tensor& x : zero->shards()) t.push_back(x);
    return t;
  };
  auto grad_tensors = [&] {
    std::vector<Tensor> t;
    for (const Tensor& w : weight_tensors())
      if (w.grad().defined()) t.push_back(w.grad());
    return t;
  };

  double weights = 0, grads = 0, state = 0, rest = 0, peak = 0;
  for (int step = 0; step < 2; ++step) {
    opt->zero_grad();
    if (step == 1) tracker.reset_peak();
    Tensor x = randint(0, c.gpt.vocab_size, {o.batch, o.seq_len});
    Tensor y = randint(0, c.gpt.vocab_size, {o.batch, o.seq_len});
    m.loss(m.net()(x), y).backward();
    if (zero)
      zero->clip_grad_norm_(1.0);
    else
      train::gpt::clip_sharded_grad_norm(m, 1.0);
    const size_t before_step = tracker.live_bytes();
    opt->step();
    if (step == 0) {
      // At rest: what stays between steps (gradients are dropped by the next zero_grad).
      weights = storage_bytes(weight_tensors());
      grads = storage_bytes(grad_tensors());
      state = static_cast<double>(tracker.live_bytes()) - static_cast<double>(before_step);
      rest = static_cast<double>(tracker.live_bytes() - base) - weights - grads - state;
    } else {
      peak = static_cast<double>(tracker.peak_bytes() - base);
    }
  }
  const auto all_weights = gather(*pg, weights), all_grads = gather(*pg, grads), all_state = gather(*pg, state),
             all_rest = gather(*pg, rest), all_peak = gather(*pg, peak);
  if (pg->rank() != 0) return;
  nlohmann::ordered_json row = {{"strategy", bench::sharding_name(s)},
                                {"ranks", n},
                                {"params", count.total},
                                {"split_params", count.split},
                                {"units", units},
                                {"params_bytes", max_of(all_weights)},
                                {"grads_bytes", max_of(all_grads)},
                                {"state_bytes", max_of(all_state)},
                                {"other_bytes", max_of(all_rest)},
                                {"peak_bytes", max_of(all_peak)}};
  std::ofstream(rows, std::ios::app) << row.dump() << "\n";
}

std::string mb(double bytes) { return fmt::format("{:.1f}", bytes / (1 << 20)); }

/// The table of the rows (one JSON object each), formula beside measured; returns the results'
/// JSON.
nlohmann::ordered_json print_table(const std::vector<nlohmann::json>& rows) {
  fmt::print("{:>7} {:>5} | {:>17} | {:>17} | {:>17} | {:>8} | {:>24} | {:>8} {:>9} | {:>7}\n", "", "ranks",
             "params MiB", "grads MiB", "AdamW state MiB", "other", "at rest MiB", "peak MiB", "formula", "vs DDP");
  fmt::print("{:>7} {:>5} | {:>8} {:>8} | {:>8} {:>8} | {:>8} {:>8} | {:>8} | {:>8} {:>8} {:>6} | {:>8} {:>9} | {:>7}\n",
             "", "", "measured", "formula", "measured", "formula", "measured", "formula", "MiB", "measured", "formula",
             "ratio", "measured", "+gathered", "at rest");
  auto at_rest = [](const nlohmann::json& r) {
    return r.at("params_bytes").get<double>() + r.at("grads_bytes").get<double>() + r.at("state_bytes").get<double>() +
           r.at("other_bytes").get<double>();
  };
  auto mib = [](double bytes) { return bytes / (1 << 20); };
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const auto& r : rows) {
    const Sharding s = bench::parse_sharding(r.at("strategy"));
    const int n = r.at("ranks");
    const bench::ParamCount count{r.at("params"), r.at("split_params")};
    const bench::MemoryBytes f = bench::formula_bytes(s, count, n);
    const double rest = at_rest(r), gathered = bench::gathered_bytes(s, r.at("units").get<std::vector<double>>());
    double ddp = 0;
    for (const auto& d : rows)
      if (d.at("strategy") == "ddp" && d.at("ranks") == n) ddp = at_rest(d);
    fmt::print("{:>7} {:>5} | {:>8} {:>8} | {:>8} {:>8} | {:>8} {:>8} | {:>8} | {:>8} {:>8} {:>5.2f}x | {:>8} {:>9} | {:>7}\n",
               bench::sharding_label(s), n, mb(r.at("params_bytes")), mb(f.params), mb(r.at("grads_bytes")),
               mb(f.grads), mb(r.at("state_bytes")), mb(f.state), mb(r.at("other_bytes")), mb(rest), mb(f.total()),
               bench::ratio(rest, f.total()), mb(r.at("peak_bytes")), mb(f.total() + gathered),
               ddp > 0 ? fmt::format("{:.1f}%", 100 * rest / ddp) : std::string("-"));
    nlohmann::ordered_json o = {{"strategy", bench::sharding_name(s)},
                                {"ranks", n},
                                {"params_mib", mib(r.at("params_bytes"))},
                                {"grads_mib", mib(r.at("grads_bytes"))},
                                {"state_mib", mib(r.at("state_bytes"))},
                                {"other_mib", mib(r.at("other_bytes"))},
                                {"at_rest_mib", mib(rest)},
                                {"formula_mib", mib(f.total())},
                                {"peak_mib", mib(r.at("peak_bytes"))},
                                {"at_rest_vs_formula", bench::ratio(rest, f.total())}};
    if (ddp > 0) o["at_rest_vs_ddp"] = rest / ddp;
    out.push_back(o);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::vector<int> nprocs = {2, 4};
  std::vector<std::string> names = {"ddp", "zero1", "zero2", "zero3", "tp"};
  cli::App app("Memory per rank of DDP, ZeRO-1/2/3 and tensor parallel on the GPT, measured beside the formulas.",
               "sharding_memory");
  app.add_option("--model", o.model, "GPT shape (vocabulary 256)")->check(cli::one_of({"d6", "d12", "d24"}));
  app.add_option("--seq-len", o.seq_len, "tokens per sequence")->check(cli::range(1, 1024));
  app.add_option("--batch-size", o.batch, "sequences per rank")->check(cli::range(1, 1024));
  app.add_option("--nproc", nprocs, "world sizes (2 or more)")->delimiter(',')->check(cli::range(2, 64));
  app.add_option("--strategies", names, "any of ddp, zero1, zero2, zero3, tp")->delimiter(',');
  if (int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  try {
    std::vector<Sharding> strategies;
    for (const std::string& name : names) strategies.push_back(bench::parse_sharding(name));
    char tmpl[] = "/tmp/sharding_memory_XXXXXX";
    const int fd = mkstemp(tmpl);
    KILN_CHECK(fd >= 0, "sharding_memory: cannot create a file under /tmp");
    close(fd);
    const std::string rows_path = tmpl;
    fmt::print("Memory per rank, GPT {} (vocabulary 256), batch {} x {} tokens, AdamW in f32 (4 + 4 + 8 bytes per "
               "parameter), Gloo on 127.0.0.1, 1 thread per rank; load average {:.2f}\n",
               o.model, o.batch, o.seq_len, bench::parse_loadavg(bench::read_text_file("/proc/loadavg")));
    std::fflush(stdout);
    for (int n : nprocs)
      for (Sharding s : strategies) {
        auto results = dist::run_local_ranks(n, [&](int, int) { run_rank(s, o, rows_path); }, {.timeout_s = 1800});
        for (size_t r = 0; r < results.size(); ++r)
          KILN_CHECK(results[r].exit_code == 0, "sharding_memory: {} on {} ranks: rank {} failed (exit {})",
                     bench::sharding_name(s), n, r, results[r].exit_code);
      }
    std::vector<nlohmann::json> rows;
    std::ifstream in(rows_path);
    for (std::string line; std::getline(in, line);) rows.push_back(nlohmann::json::parse(line));
    std::remove(rows_path.c_str());
    nlohmann::ordered_json results = print_table(rows);
    fmt::print("at rest: everything held after a step (params + grads + state + other: buffers of the implementation, "
               "such as DDP's buckets when the gradients are not views of them, ZeRO-1's f32 shards, masks); ratio: "
               "measured / formula; +gathered: the formula plus the parameters FSDP gathers during a step (ZeRO-2: "
               "all; ZeRO-3: the root and two blocks); the peak also holds activations and temporaries\n");
    nlohmann::ordered_json line = {{"benchmark", "sharding_memory"}, {"model", o.model}, {"seq_len", o.seq_len},
                                   {"batch_size", o.batch}, {"results", results},
                                   {"loadavg", bench::parse_loadavg(bench::read_text_file("/proc/loadavg"))}};
    fmt::print("{}\n", line.dump());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
