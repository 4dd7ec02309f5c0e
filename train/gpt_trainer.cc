// The GPT trainers' shared parts and the dispatch between them (see gpt_trainer.h); the
// one-process / DDP / ZeRO-1 recipe on train::Trainer is in gpt_fit.cc.
#include "train/gpt_trainer.h"

#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <ctime>

#include <nlohmann/json.hpp>

#include "core/parallel.h"
#include "models/gpt_hf.h"
#include "train/gpt_fit.h"
#include "train/gpt_pipeline.h"
#include "train/gpt_sharded.h"
#include "train/run_monitor.h"
#include "optim/adam.h"
#include "profiler/memory.h"

namespace kiln::train::gpt {
using namespace models::gpt;
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

void set_peak(const TrainConfig& c, int ranks, TrainResult& r) {
  if (c.peak_tflops > 0) {
    r.peak_flops = c.peak_tflops * 1e12;
    r.peak_description = fmt::format("--peak-tflops {}", c.peak_tflops);
  } else {
    r.peak_flops = measured_cpu_gemm_flops(&r.peak_description, ranks);
  }
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
  return fit(config, log);  // one process, --ddp, --ddp --zero 1: train::Trainer
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
      {"peak_gflops", r.peak_flops / 1e9},
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
