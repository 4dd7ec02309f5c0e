// The GPT trainers' configuration, results and shared parts (examples/gpt.cc parses the flags):
// AdamW (no weight decay on biases, LayerNorms and embeddings), linear warm-up then cosine decay,
// gradient clipping, gradient accumulation up to a token budget per step, bf16/f16 autocast,
// periodic validation, checkpoints that resume exactly (and across the trainers), a sample at the
// end. train() runs one process, --ddp and --ddp --zero 1 through train::Trainer (gpt_fit.h);
// pipelines (and 3D with --tp): gpt_pipeline.h; tensor parallel and FSDP (--tp, --zero 2|3):
// gpt_sharded.h.
#pragma once

#include <chrono>
#include <cstdint>
#include <ctime>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "core/device.h"
#include "models/gpt_model.h"
#include "train/mixed_precision.h"
#include "train/checkpoint.h"
#include "optim/adam.h"

namespace kiln::train::gpt {

// The model this trainer trains (models/gpt_model.h).
using models::gpt::GPT;
using models::gpt::GPTConfig;

struct TrainConfig {
  std::string model = "d6";  // the name the shape came from (or "custom"), for the JSON line
  GPTConfig gpt;             // the shape (vocab 256 for bytes)
  std::string data = "/usr/share/games/fortunes";
  std::string init_from_hf;  // a save_pretrained directory (sets the shape, GPT-2 byte tokens)
  int64_t batch_size = 8;    // sequences per micro-batch per rank
  int64_t seq_len = 0;       // tokens per sequence (0: block_size)
  int64_t total_batch_tokens = 0;  // tokens per optimizer step over all ranks (0: one micro-batch each)
  int64_t max_steps = 200;
  double lr = 1e-3, min_lr = 1e-4;
  int64_t warmup_steps = 20;
  double weight_decay = 0.1, beta1 = 0.9, beta2 = 0.95, grad_clip = 1.0;
  int64_t eval_every = 50, eval_batches = 8, log_every = 1;
  std::string save;         // checkpoint path (safetensors), written every save_every steps and at the end
  int64_t save_every = 0;   // 0: only at the end
  std::string resume;       // continue the run saved here
  int64_t stop_after_steps = 0;  // stop this invocation after N steps (the schedule still spans max_steps)
  std::string save_hf;      // at the end, also write the Hugging Face layout here
  std::string amp = "none"; // or "bf16", "f16"
  double loss_scale = 65536;  // --amp f16: the dynamic loss scale to start from
  bool ddp = false;
  int pipeline_stages = 1;          // > 1: one rank per stage (gpt_pipeline.h)
  int micro_batches = 1;            // pipeline micro-batches per --batch-size batch
  std::string pipeline_schedule = "1f1b";
  int virtual_stages = 1;            // --pipeline-schedule interleaved: model chunks per rank
  /// ZeRO stage under `ddp`: 0 (off), 2 or 3 (FSDP, below) or 1 (dist::ZeroRedundancyOptimizer: each rank keeps the AdamW
  /// state of 1/N of the parameters; gradients reduce-scattered, parameters all-gathered). Its
  /// checkpoints are consolidated: a plain --ddp run resumes them and vice versa.
  int zero = 0;
  /// --tp: tensor-parallel ranks (Megatron's split of heads, MLP features and vocabulary);
  /// with zero 2 (dist::ShardingStrategy::kShardGradOp) or 3 (kFullShard, --fsdp) the model is
  /// fully sharded over the data-parallel ranks instead of replicated (gpt_sharded.h).
  int tp = 1;
  bool sequence_parallel = false;  // --sequence-parallel (with --tp): LayerNorms on 1/T of the sequence
  /// --hsdp-shard-size (with zero 2|3): hybrid sharding, FSDP within groups of this many
  /// data-parallel ranks, replicated across the groups (0: one group of all of them).
  int hsdp_shard_size = 0;
  uint64_t seed = 1337;
  int threads = 0;
  Device device;
  int64_t sample_tokens = 200;
  double temperature = 0.8;
  int64_t top_k = 40;
  std::string prompt = "\n";
  double peak_tflops = 0;   // 0: the CPU's measured f32 GEMM rate (set_peak)
  std::string profile_dir;  // "": no profile; else the op table of the steps below, a trace in DIR
  int64_t profile_wait = 2, profile_warmup = 1, profile_active = 3;  // --profile-steps wait,warmup,active
};

struct TrainResult {
  GPTConfig gpt;  // the shape trained (from --init-from-hf's config.json when given)
  std::vector<double> step_losses;                     // training loss of every step run, in order
  std::vector<double> step_seconds;                    // wall time of every step run (device work included)
  std::vector<std::pair<int64_t, double>> val_losses;  // (step, validation loss)
  int64_t steps_done = 0;  // the global step reached
  int64_t params = 0, tokens_per_step = 0, grad_accum = 1;
  /// tokens_per_cpu_sec: per second of this process's CPU time over all its threads (robust to
  /// other processes sharing the cores).
  double tokens_per_sec = 0, tokens_per_cpu_sec = 0, mfu = 0, peak_flops = 0, wall_seconds = 0;
  double peak_rss_mb = 0;
  double peak_device_mb = 0;  // on a GPU: the most its tensors held at once (0 on the CPU)
  int64_t skipped_steps = 0;  // --amp f16: optimizer steps the loss scaler skipped (inf/NaN gradients)
  double loss_scale = 1;      // --amp f16: the loss scale at the end
  int64_t checkpoints = 0;        // checkpoints written (--save-every and the final one)
  double checkpoint_seconds = 0;  // wall time spent writing them (rank 0's, waits included)
  std::string peak_description, sample;
  int rank = 0, world_size = 1;
};

/// Sets c.gpt from --init-from-hf's config.json when given, checks the vocabulary holds the byte
/// tokens, and returns the sequence length (--seq-len, or the block size), checked against it.
int64_t resolve_shape(TrainConfig& c);

/// The lr at `step`: linear warm-up to `lr` over warmup_steps, cosine to min_lr at max_steps.
double lr_at(const TrainConfig& c, int64_t step);

/// Trains as configured, progress to `log` (rank 0 only). Throws kiln::Error on bad input.
TrainResult train(const TrainConfig& config, std::ostream& log);

/// The decay rule: the matrices of the linear layers (`dim` >= 2, not wte or wpe).
bool weight_decayed(const std::string& name, int64_t dim);
/// AdamW's two groups over parameters named as in the GPT: weight decay on the matrices of the
/// linear layers only (not biases, LayerNorms or the embeddings, the tied head included).
std::vector<optim::ParamGroup> param_groups(const TrainConfig& c, const nn::NamedTensors& named);
optim::AdamOptions adam_options(const TrainConfig& c);
/// AdamW over param_groups with adam_options.
std::unique_ptr<optim::AdamW> make_optimizer(const TrainConfig& c, const nn::NamedTensors& named);

/// What a checkpoint must agree on to be resumed (saved as TrainingState::extra["gpt"]): the
/// model's shape, the sequence length `t` and the seed the data order comes from.
std::string run_signature(const TrainConfig& c, int64_t t);
/// Checks that `state`, loaded from c.resume, belongs to this run (its signature) and restores the
/// mixed precision state into `mp` (refusing another --amp); logs the step resumed at.
void accept_resumed(const TrainConfig& c, int64_t t, const train::TrainingState& state, MixedPrecision& mp,
                    std::ostream& out);

/// The peak MFU is taken against, into r.peak_flops and r.peak_description: --peak-tflops when
/// given, else the CPU's measured f32 GEMM rate (train/run_monitor.h) summed over `ranks` ranks.
void set_peak(const TrainConfig& c, int ranks, TrainResult& r);

/// This process's peak resident memory in MB.
double peak_rss_mb();

/// After optimizer step `step` (counted from 1): when a validation is due (every eval_every steps
/// and at max_steps), runs `evaluate`, records and logs the loss.
void validate_if_due(const TrainConfig& c, int64_t step, const std::function<double()>& evaluate, TrainResult& r,
                     std::ostream& out);

/// The throughput bookkeeping both training loops (one process, pipelined) share.
struct StepTimes {
  double train_seconds = 0, cpu_seconds = 0;  // cpu: all threads of this process (contention shows)
  int64_t timed_tokens = 0;
  std::chrono::steady_clock::time_point run_start = std::chrono::steady_clock::now(), step_start;
  std::clock_t step_cpu_start = 0;
  /// At the start of a step.
  void begin();
  /// At its end: waits for `device`'s queued work, records the step's loss and wall seconds in r
  /// and, after the first step (it warms up), adds its wall and CPU seconds to the totals.
  /// Returns its wall seconds.
  double record(TrainResult& r, double loss, int64_t tokens, const Device& device);
  /// Sets r's wall_seconds (since this was made), tokens_per_sec, tokens_per_cpu_sec, mfu,
  /// peak_rss_mb and peak_device_mb (of `device`).
  void finish(TrainResult& r, double flops_per_token, const Device& device) const;
};

/// The progress line's tail under --amp f16: " | scale S" (and the steps skipped so far); ""
/// otherwise.
std::string scaler_note(const amp::GradScaler& scaler);

/// The closing JSON line (model, shape, steps, losses, tokens/s, MFU, ...).
std::string result_json(const TrainConfig& config, const TrainResult& result);

}  // namespace kiln::train::gpt
