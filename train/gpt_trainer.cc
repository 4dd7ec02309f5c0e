// The GPT training loop (see gpt_trainer.h).
#include "train/gpt_trainer.h"

#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>

#include <nlohmann/json.hpp>

#include "core/parallel.h"
#include "data/text_corpus.h"
#include "distributed/backend/init.h"
#include "distributed/data_parallel/ddp.h"
#include "distributed/data_parallel/scaler_sync.h"
#include "distributed/data_parallel/zero.h"
#include "models/gpt_hf.h"
#include "models/gpt_sample.h"
#include "train/checkpoint.h"
#include "train/distributed_checkpoint.h"
#include "train/gpt_pipeline.h"
#include "train/gpt_sharded.h"
#include "train/mixed_precision.h"
#include "train/run_monitor.h"
#include "train/zero_checkpoint.h"
#include "optim/adam.h"
#include "optim/clip.h"
#include "profiler/memory.h"

namespace kiln::train::gpt {
using namespace models::gpt;
using namespace data::text;
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

std::string run_signature(const TrainConfig& c, int64_t t) {
  const GPTConfig& g = c.gpt;
  return fmt::format("layers={} heads={} embd={} block={} vocab={} seq={} seed={}", g.n_layer, g.n_head, g.n_embd,
                     g.block_size, g.vocab_size, t, c.seed);
}

void accept_resumed(const TrainConfig& c, int64_t t, const train::TrainingState& state, MixedPrecision& mp,
                    std::ostream& out) {
  const std::string saved = state.extra.count("gpt") ? state.extra.at("gpt") : "(none)";
  KILN_CHECK(saved == run_signature(c, t), "--resume {}: the checkpoint's run ({}) differs from this one ({})",
             c.resume, saved, run_signature(c, t));
  mp.load(state);
  out << fmt::format("resumed from {} at step {}\n", c.resume, state.step);
}

bool weight_decayed(const std::string& name, int64_t dim) {
  return dim >= 2 && !name.starts_with("wte") && !name.starts_with("wpe");
}

std::vector<optim::ParamGroup> param_groups(const TrainConfig& c, const nn::NamedTensors& named) {
  std::vector<Tensor> decay, no_decay;
  for (auto& [name, p] : named) (weight_decayed(name, p.dim()) ? decay : no_decay).push_back(p);
  return {{decay, {{"weight_decay", c.weight_decay}}}, {no_decay, {{"weight_decay", 0.0}}}};
}

optim::AdamOptions adam_options(const TrainConfig& c) {
  return optim::AdamOptions(c.lr).set_betas(c.beta1, c.beta2).set_eps(1e-8);
}

std::unique_ptr<optim::AdamW> make_optimizer(const TrainConfig& c, const nn::NamedTensors& named) {
  return std::make_unique<optim::AdamW>(param_groups(c, named), adam_options(c));
}

double peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

void validate_if_due(const TrainConfig& c, int64_t step, const std::function<double()>& evaluate, TrainResult& r,
                     std::ostream& out) {
  if (!((c.eval_every > 0 && step % c.eval_every == 0) || step == c.max_steps)) return;
  const double v = evaluate();
  r.val_losses.emplace_back(step, v);
  out << fmt::format("step {} | val loss {:.4f} | {:.4f} bits per byte\n", step, v, v / std::log(2.0));
}

void StepTimes::begin() {
  step_start = Clock::now();
  step_cpu_start = std::clock();
}

double StepTimes::record(TrainResult& r, double loss, int64_t tokens, const Device& device) {
  synchronize(device);  // the optimizer's kernels may still be queued
  const double wall = seconds_since(step_start);
  const double cpu = static_cast<double>(std::clock() - step_cpu_start) / CLOCKS_PER_SEC;
  r.step_losses.push_back(loss);
  r.step_seconds.push_back(wall);
  if (r.step_losses.size() > 1) train_seconds += wall, cpu_seconds += cpu, timed_tokens += tokens;
  return wall;
}

void StepTimes::finish(TrainResult& r, double flops_per_token, const Device& device) const {
  r.wall_seconds = seconds_since(run_start);
  r.tokens_per_sec = train_seconds > 0 ? static_cast<double>(timed_tokens) / train_seconds : 0;
  r.tokens_per_cpu_sec = cpu_seconds > 0 ? static_cast<double>(timed_tokens) / cpu_seconds : 0;
  r.mfu = r.tokens_per_sec * flops_per_token / r.peak_flops;
  r.peak_rss_mb = peak_rss_mb();
  if (device.is_cuda()) r.peak_device_mb = static_cast<double>(profiler::memory_counters(device.type).peak) / (1 << 20);
}

int64_t resolve_shape(TrainConfig& c) {
  const bool hf = !c.init_from_hf.empty();
  if (hf) c.gpt = read_hf_config(c.init_from_hf);
  KILN_CHECK(c.gpt.vocab_size >= 256, "{}: vocab_size {} cannot hold the 256 byte tokens",
             hf ? "--init-from-hf " + c.init_from_hf : std::string("--vocab-size"), c.gpt.vocab_size);
  const int64_t t = c.seq_len > 0 ? c.seq_len : c.gpt.block_size;
  KILN_CHECK(t <= c.gpt.block_size, "--seq-len {} exceeds the model's block size {}", t, c.gpt.block_size);
  return t;
}

double lr_at(const TrainConfig& c, int64_t step) {
  if (step < c.warmup_steps) return c.lr * static_cast<double>(step + 1) / static_cast<double>(c.warmup_steps);
  if (step >= c.max_steps) return c.min_lr;
  const double progress =
      static_cast<double>(step - c.warmup_steps) / static_cast<double>(std::max<int64_t>(c.max_steps - c.warmup_steps, 1));
  return c.min_lr + 0.5 * (1.0 + std::cos(M_PI * progress)) * (c.lr - c.min_lr);
}

TrainResult train(const TrainConfig& config, std::ostream& log) {
  KILN_CHECK(config.zero >= 0 && config.zero <= 3,
             "--zero {}: the stages are 1 (optimizer state), 2 (and gradients) and 3 (and parameters)", config.zero);
  if (config.pipeline_stages > 1) return train_pipeline(config, log);  // with --tp: 3D
  if (is_sharded(config)) return train_sharded(config, log);
  TrainConfig c = config;
  if (c.threads > 0) set_num_threads(c.threads);
  const bool hf = !c.init_from_hf.empty();
  const int64_t t = resolve_shape(c);

  std::shared_ptr<dist::ProcessGroup> pg;
  KILN_CHECK(!c.ddp || std::getenv("WORLD_SIZE") != nullptr,
             "--ddp: WORLD_SIZE is not set; start the ranks with `bazel-bin/distributed/launch/launch --nproc-per-node N -- "
             "bazel-bin/examples/gpt --ddp ...`");
  KILN_CHECK(c.zero == 0 || c.ddp, "--zero 1 shards the optimizer state over data-parallel ranks: add --ddp");
  if (c.ddp) pg = dist::init_process_group({.backend = c.device.is_cuda() ? "nccl" : "gloo"});
  const int rank = pg ? pg->rank() : 0, world = pg ? pg->size() : 1;
  std::ostream quiet(nullptr);
  std::ostream& out = rank == 0 ? log : quiet;

  const Splits data = split_corpus(read_corpus(c.data), t + 1);
  const std::vector<int64_t> ids = byte_token_ids(hf);
  const int64_t micro_tokens = c.batch_size * t * world;
  const int64_t budget = c.total_batch_tokens > 0 ? c.total_batch_tokens : micro_tokens;
  KILN_CHECK(budget % micro_tokens == 0,
             "--total-batch-tokens {} is not a multiple of --batch-size x seq-len x ranks = {} x {} x {} = {}", budget,
             c.batch_size, t, world, micro_tokens);
  const int64_t accum = budget / micro_tokens;

  // On a GPU, before the model: the device peak counts every tensor of the run (the CPU's
  // allocations go uncounted: peak_rss_mb says what they cost).
  if (c.device.is_cuda()) profiler::track_memory();
  manual_seed(c.seed);
  auto model = std::make_shared<GPT>(c.gpt);
  if (hf) load_hf(*model, c.init_from_hf);
  model->to(c.device);
  MixedPrecision mp(c.amp, "o1", c.loss_scale);
  // Without ZeRO the optimizer and the resumed state come first, and DDP then broadcasts rank 0's
  // (identical) weights; ZeRO's optimizer wraps the shards of DDP's reducer, so it comes after.
  std::unique_ptr<optim::Optimizer> opt;
  dist::ZeroRedundancyOptimizer* zero = nullptr;  // opt, under --zero 1
  train::TrainingState state;
  auto resumed = [&](train::TrainingState loaded) {
    state = std::move(loaded);
    accept_resumed(c, t, state, mp, out);
  };
  if (c.zero == 0) {
    opt = make_optimizer(c, model->named_parameters());
    if (!c.resume.empty())
      resumed(pg ? dist::load_checkpoint(*pg, c.resume, *model, opt.get()) : train::load_checkpoint(c.resume, *model, opt.get()));
  }
  std::unique_ptr<dist::DistributedDataParallel> ddp;
  if (pg) ddp = std::make_unique<dist::DistributedDataParallel>(model, pg);
  if (c.zero == 1) {
    auto z = std::make_unique<dist::ZeroRedundancyOptimizer>(*ddp, param_groups(c, model->named_parameters()),
                                                             dist::optimizer_factory<optim::AdamW>(adam_options(c)));
    dist::share_found_inf(mp.scaler(), pg);  // each rank checks only its shard's gradients
    if (!c.resume.empty()) resumed(dist::load_zero_checkpoint(c.resume, *model, *z));  // consolidated or sharded
    out << fmt::format("ZeRO-1: {} ({} buckets), optimizer state sharded over {} ranks\n", z->name(),
                       z->reducer().buckets().size(), world);
    zero = z.get();
    opt = std::move(z);
  }
  nn::Module& net = ddp ? static_cast<nn::Module&>(*ddp) : *model;

  TrainResult r;
  r.gpt = c.gpt;
  r.rank = rank, r.world_size = world, r.grad_accum = accum, r.tokens_per_step = budget;
  r.params = model->num_parameters();
  const int used_threads = get_num_threads() * world;
  r.peak_flops = c.peak_tflops > 0 ? c.peak_tflops * 1e12 : cpu_peak_flops(used_threads, &r.peak_description);
  if (c.peak_tflops > 0) r.peak_description = fmt::format("--peak-tflops {}", c.peak_tflops);
  const double flops_per_step = model->flops_per_token(t) * static_cast<double>(budget);
  out << fmt::format("gpt: {} ({} layers, {} heads, {} wide, vocab {}), {:.2f}M parameters; {} train / {} val bytes; "
                     "{} tokens per step = {} x {} tokens x {} micro-steps x {} ranks; peak {:.1f} GFLOP/s ({})\n",
                     c.model, c.gpt.n_layer, c.gpt.n_head, c.gpt.n_embd, c.gpt.vocab_size, r.params / 1e6,
                     data.train.size(), data.val.size(), budget, c.batch_size, t, accum, world, r.peak_flops / 1e9,
                     r.peak_description);

  auto evaluate = [&]() {
    NoGradGuard g;
    model->eval();
    // Batch i is the same rows whatever the world size: rank r takes its r-th slice of them.
    const int64_t n = std::min(c.eval_batches, sequential_batches(data.val, c.batch_size * world, t));
    double sum = 0, count = 0;
    for (int64_t i = 0; i < n; ++i) {
      Batch b = sequential_batch(data.val, ids, c.batch_size, t, i * world + rank);
      amp::AutocastGuard autocast = mp.autocast();
      sum += GPT::loss(model->forward(b.x.to(c.device)), b.y.to(c.device)).item<double>();
      count += 1;
    }
    model->train();
    if (pg) {
      Tensor s = tensor({sum, count}, dtype(kFloat64));
      pg->allreduce(s)->wait();
      auto v = s.to_vector<double>();
      sum = v[0], count = v[1];
    }
    return sum / std::max(count, 1.0);
  };
  auto save = [&]() {
    if (c.save.empty()) return;
    const Clock::time_point start = Clock::now();
    state.rng = default_generator().state();
    state.extra["gpt"] = run_signature(c, t);
    mp.save(state);
    if (zero) dist::save_zero_checkpoint(c.save, *model, *zero, state);  // consolidated: any run resumes it
    else if (pg) dist::save_checkpoint(*pg, c.save, *model, opt.get(), state);
    else train::save_checkpoint(c.save, *model, opt.get(), state);
    r.checkpoints += 1;
    r.checkpoint_seconds += seconds_since(start);
    out << fmt::format("saved {} at step {}\n", c.save, state.step);
  };

  StepTimes times;
  const int64_t last = c.stop_after_steps > 0 ? std::min(c.max_steps, state.step + c.stop_after_steps) : c.max_steps;
  // --profile: as the main job's, on this invocation's steps (wait, record and drop warm-up,
  // keep active); then the op table and the kernel classes are printed.
  std::unique_ptr<RunMonitor> monitor;
  if (!c.profile_dir.empty())
    monitor = std::make_unique<RunMonitor>(
        MonitorConfig{.profile_dir = c.profile_dir,
                      .schedule = {.wait = c.profile_wait, .warmup = c.profile_warmup, .active = c.profile_active},
                      .log_every = int64_t{1} << 40},
        rank, 0.0, c.device.is_cuda(), out);
  while (state.step < last) {
    const int64_t step = state.step;
    times.begin();
    if (monitor) monitor->step_begin();
    opt->zero_grad();
    double loss_sum = 0;
    for (int64_t micro = 0; micro < accum; ++micro) {
      const uint64_t row = static_cast<uint64_t>(((step * accum + micro) * world + rank) * c.batch_size);
      Batch b = random_batch(data.train, ids, c.batch_size, t, c.seed, row);
      std::optional<dist::DistributedDataParallel::NoSyncGuard> no_sync;
      if (ddp && micro + 1 < accum) no_sync.emplace(*ddp);  // all-reduce once, on the last
      Tensor loss;
      {
        amp::AutocastGuard autocast = mp.autocast();
        loss = GPT::loss(net(b.x.to(c.device)), b.y.to(c.device)) / static_cast<double>(accum);
      }
      mp.backward(loss);
      loss_sum += loss.item<double>();
    }
    if (mp.scaler().is_enabled()) mp.scaler().unscale_(*opt);
    // Under ZeRO the averaged gradients live in this rank's shards: the norm is reduced over them all.
    const double norm = zero ? zero->clip_grad_norm_(c.grad_clip) : optim::clip_grad_norm_(model->parameters(), c.grad_clip);
    const double lr = lr_at(c, step);
    opt->set_lr(lr);
    mp.step(*opt);
    if (pg) {
      Tensor l = tensor({loss_sum}, dtype(kFloat64));
      pg->allreduce(l, dist::ReduceOp::kAvg)->wait();
      loss_sum = l.item<double>();
    }
    const double dt = times.record(r, loss_sum, budget, c.device);
    if (monitor) monitor->step_end(budget / t, loss_sum, lr, norm, mp.scaler().scale());
    ++state.step;
    const double tok_s = static_cast<double>(budget) / dt, mfu = flops_per_step / dt / r.peak_flops;
    if (state.step % c.log_every == 0 || state.step == last)
      out << fmt::format("step {}/{} | loss {:.4f} | lr {:.3e} | norm {:.3f} | {:.0f} ms | {:.0f} tok/s | mfu {:.1f}%{}\n",
                         state.step, c.max_steps, loss_sum, lr, norm, dt * 1e3, tok_s, 100 * mfu,
                         scaler_note(mp.scaler()));
    validate_if_due(c, state.step, evaluate, r, out);
    if (c.save_every > 0 && state.step % c.save_every == 0 && state.step != last) save();
  }
  monitor.reset();  // a run that ended inside the profiled steps keeps what was recorded
  save();
  if (!c.save_hf.empty() && rank == 0) {
    save_hf(*model, c.save_hf);
    out << fmt::format("wrote Hugging Face layout to {}\n", c.save_hf);
  }
  r.steps_done = state.step;
  r.skipped_steps = mp.skipped_steps();
  r.loss_scale = mp.scaler().scale();
  times.finish(r, model->flops_per_token(t), c.device);
  if (rank == 0 && c.sample_tokens > 0) {
    amp::AutocastGuard autocast = mp.autocast();
    r.sample = generate(*model, c.prompt,
                        {.tokens = c.sample_tokens, .temperature = c.temperature, .top_k = c.top_k, .seed = c.seed,
                         .gpt2_bytes = hf},
                        c.device);
    out << "sample:\n" << r.sample << "\n";
  }
  return r;
}

std::string scaler_note(const amp::GradScaler& scaler) {
  if (!scaler.is_enabled()) return "";
  return scaler.skipped_steps() > 0 ? fmt::format(" | scale {:g} ({} skipped)", scaler.scale(), scaler.skipped_steps())
                                    : fmt::format(" | scale {:g}", scaler.scale());
}

std::string result_json(const TrainConfig& c, const TrainResult& r) {
  nlohmann::ordered_json line = {
      {"model", c.model},
      {"n_layer", r.gpt.n_layer}, {"n_head", r.gpt.n_head}, {"n_embd", r.gpt.n_embd},
      {"block_size", r.gpt.block_size}, {"vocab_size", r.gpt.vocab_size},
      {"params", r.params},
      {"device", c.device.str()},
      {"threads", get_num_threads()},
      {"world_size", r.world_size},
      {"pipeline_stages", c.pipeline_stages},
      {"virtual_stages", c.pipeline_stages > 1 ? c.virtual_stages : 1},
      {"zero", c.zero},
      {"tp", c.tp},
      {"amp", c.amp},
      {"steps", r.steps_done},
      {"skipped_steps", r.skipped_steps},
      {"loss_scale", r.loss_scale},
      {"tokens_per_step", r.tokens_per_step},
      {"grad_accum", r.grad_accum},
      {"train_loss", r.step_losses.empty() ? 0.0 : r.step_losses.back()},
      {"val_loss", r.val_losses.empty() ? 0.0 : r.val_losses.back().second},
      {"val_bpb", r.val_losses.empty() ? 0.0 : r.val_losses.back().second / std::log(2.0)},
      {"tokens_per_sec", r.tokens_per_sec},
      {"tokens_per_cpu_sec", r.tokens_per_cpu_sec},
      {"mfu", r.mfu},
      {"peak_rss_mb", r.peak_rss_mb},
      {"peak_device_mb", r.peak_device_mb},
      {"checkpoints", r.checkpoints},
      {"checkpoint_seconds", r.checkpoint_seconds},
      {"wall_seconds", r.wall_seconds},
  };
  nlohmann::json curve = nlohmann::json::array();
  for (auto& [step, v] : r.val_losses) curve.push_back({step, v});
  line["val_curve"] = curve;
  line["step_losses"] = r.step_losses;
  line["step_ms"] = nlohmann::json::array();
  for (double sec : r.step_seconds) line["step_ms"].push_back(sec * 1e3);
  return line.dump();
}

}  // namespace kiln::train::gpt
