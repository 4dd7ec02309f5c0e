// The GPT trainer's flags (gpt_flags.h).
#include "examples/gpt_flags.h"

#include "examples/pipeline_flags.h"

namespace kiln::examples {

void GptFlags::declare(CLI::App& app) {
  model = app.add_option("--model", c.model, "named shape: d6, d12 (GPT-2 small) or d24 (GPT-2 medium)")
              ->check(cli::one_of({"d6", "d12", "d24"}));
  n_layer = app.add_option("--n-layer", layers, "layers (overrides --model)")->check(cli::range<int64_t>(1, 1000));
  n_head = app.add_option("--n-head", heads, "attention heads")->check(cli::range<int64_t>(1, 1024));
  n_embd = app.add_option("--n-embd", embd, "width")->check(cli::range<int64_t>(1, 1 << 16));
  block = app.add_option("--block-size", block_size, "positions")->check(cli::range<int64_t>(1, 1 << 16));
  vocab_opt = app.add_option("--vocab-size", vocab, "vocabulary (>= 256: token ids are bytes)")
                  ->check(cli::range<int64_t>(256, 1 << 20));
  app.add_option("--dropout", c.gpt.dropout, "dropout")->check(cli::range(0.0, 0.99));
  app.add_flag("--activation-checkpointing", c.gpt.checkpoint_activations,
               "recompute each block's activations in backward (less memory, about 1/3 more compute)");
  app.add_option("--data", c.data, "text file or directory of text files (default: Debian's fortunes)");
  app.add_option("--init-from-hf", c.init_from_hf, "start from a Hugging Face GPT-2 save_pretrained directory");
  app.add_option("--save-hf", c.save_hf, "at the end, write the model in Hugging Face's layout to this directory");
  app.add_option("--batch-size", c.batch_size, "sequences per micro-batch (per rank)")
      ->check(cli::range<int64_t>(1, 1 << 16));
  app.add_option("--seq-len", c.seq_len, "tokens per sequence (0: the block size)")
      ->check(cli::range<int64_t>(0, 1 << 16));
  app.add_option("--total-batch-tokens", c.total_batch_tokens,
                 "tokens per optimizer step over all ranks; gradients accumulate up to it (0: one micro-batch)")
      ->check(cli::range<int64_t>(0, INT64_MAX));
  app.add_option("--max-steps", c.max_steps, "optimizer steps of the whole run")->check(cli::range<int64_t>(1, 1 << 30));
  app.add_option("--lr", c.lr, "peak learning rate")->check(cli::range(0.0, 10.0));
  app.add_option("--min-lr", c.min_lr, "learning rate at the end of the cosine")->check(cli::range(0.0, 10.0));
  app.add_option("--warmup-steps", c.warmup_steps, "linear warm-up steps")->check(cli::range<int64_t>(1, 1 << 30));
  app.add_option("--weight-decay", c.weight_decay, "AdamW decay of the linear weights")->check(cli::range(0.0, 10.0));
  app.add_option("--grad-clip", c.grad_clip, "clip the gradient norm to this")->check(cli::range(0.0, 1e9));
  app.add_option("--eval-every", c.eval_every, "steps between validation losses (0: only at the end)")
      ->check(cli::range<int64_t>(0, 1 << 30));
  app.add_option("--eval-batches", c.eval_batches, "validation batches per evaluation")
      ->check(cli::range<int64_t>(1, 1 << 20));
  app.add_option("--log-every", c.log_every, "steps between progress lines")->check(cli::range<int64_t>(1, 1 << 30));
  app.add_option("--save", c.save, "checkpoint (safetensors), written every --save-every steps and at the end");
  app.add_option("--save-every", c.save_every, "steps between checkpoints (0: only at the end)")
      ->check(cli::range<int64_t>(0, 1 << 30));
  app.add_option("--resume", c.resume, "continue the run saved in this checkpoint");
  app.add_option("--stop-after-steps", c.stop_after_steps, "stop this invocation after N steps (0: never)")
      ->check(cli::range<int64_t>(0, 1 << 30));
  app.add_option("--amp", c.amp, "mixed precision: none, bf16 (autocast) or f16 (autocast and a dynamic loss scale)")
      ->check(cli::one_of({"none", "bf16", "f16"}));
  app.add_option("--loss-scale", c.loss_scale, "--amp f16: the dynamic loss scale to start from (halved on every "
                 "step with inf/NaN gradients, which is skipped; doubled after 2000 clean steps)")
      ->check(cli::range(1e-30, 1e30));
  app.add_flag("--ddp", c.ddp, "data parallel across the ranks started by //distributed/launch");
  app.add_option("--pipeline-stages", c.pipeline_stages,
                 "pipeline parallel: the model split into P stages, one rank each under //distributed/launch")
      ->check(cli::range(1, 64));
  micro = app.add_option("--micro-batches", c.micro_batches,
                         "pipeline: micro-batches per --batch-size batch (it must divide by them)")
              ->check(cli::range(1, 1 << 16));
  const examples::PipelineScheduleOptions schedule_options = examples::add_pipeline_schedule_options(
      app, "--pipeline-schedule,--schedule", c.pipeline_schedule, c.virtual_stages);
  schedule = schedule_options.schedule;
  virtual_stages = schedule_options.virtual_stages;
  app.add_option("--zero", c.zero,
                 "ZeRO stage with --ddp: 1 shards AdamW's state over the ranks; 2 also the gradients and 3 also the "
                 "parameters (FSDP over the data-parallel ranks; with --pipeline-stages each stage over its own)")
      ->check(cli::range(0, 3));
  app.add_flag("--fsdp", fsdp, "fully sharded data parallel: --ddp --zero 3");
  app.add_option("--hsdp-shard-size", c.hsdp_shard_size,
                 "with --fsdp or --zero 2|3: hybrid sharding, FSDP within groups of S data-parallel ranks, replicated "
                 "across the groups (S divides the data ranks)")
      ->check(cli::range(1, 1 << 16));
  app.add_option("--tp", c.tp,
                 "tensor parallel: each block's heads and MLP features and the vocabulary split over T ranks "
                 "(world = data x T under //distributed/launch)")
      ->check(cli::range(1, 1024));
  app.add_flag("--sequence-parallel", c.sequence_parallel,
               "with --tp: LayerNorms and dropout on 1/T of the sequence (reduce-scatter / all-gather)");
  app.add_option("--seed", c.seed, "seed for init, data order and sampling");
  app.add_option("--threads", c.threads, "CPU threads (0: all cores)")->check(cli::range(0, 1024));
  app.add_option("--device", device, "cpu|cuda|cuda:N")
      ->check(cli::accepted_by([](const std::string& s) { (void)Device(s); }));
  app.add_option("--sample-tokens", c.sample_tokens, "bytes to generate at the end (0: none)")
      ->check(cli::range<int64_t>(0, 1 << 20));
  app.add_option("--temperature", c.temperature, "sampling temperature")->check(cli::range(1e-3, 100.0));
  app.add_option("--top-k", c.top_k, "sample among the k likeliest tokens (0: all)")->check(cli::range<int64_t>(0, 1 << 20));
  app.add_option("--prompt", c.prompt, "text the sample continues");
  app.add_option("--profile", c.profile_dir, "profile a few steps: Chrome trace in DIR, op table printed");
  app.add_option("--profile-steps", profile_steps, "profiler schedule: wait,warmup,active steps")
      ->expected(3)
      ->delimiter(',')
      ->check(cli::range<int64_t>(0, 1 << 30));
  app.add_option("--peak-tflops", c.peak_tflops, "the device's peak for MFU (default: this CPU's measured f32 GEMM rate)")
      ->check(cli::range(0.0, 1e6));
}

std::string GptFlags::finish() {
  const double dropout = c.gpt.dropout;
  const bool checkpoint_activations = c.gpt.checkpoint_activations;
  c.gpt = models::gpt::named_config(c.model, vocab);
  c.gpt.dropout = dropout;
  c.gpt.checkpoint_activations = checkpoint_activations;
  if (n_layer->count()) c.gpt.n_layer = layers;
  if (n_head->count()) c.gpt.n_head = heads;
  if (n_embd->count()) c.gpt.n_embd = embd;
  if (block->count()) c.gpt.block_size = block_size;
  if (n_layer->count() + n_head->count() + n_embd->count() + block->count() > 0 && model->count() == 0)
    c.model = "custom";
  if (c.gpt.n_embd % c.gpt.n_head != 0)
    return fmt::format("--n-embd {} must be a multiple of --n-head {}", c.gpt.n_embd, c.gpt.n_head);
  if (!c.init_from_hf.empty() && (vocab_opt->count() || n_layer->count() || n_head->count() || n_embd->count()))
    return "--init-from-hf takes the model's shape from its config.json: drop the shape flags";
  if (!c.init_from_hf.empty()) c.model = "hf";
  for (CLI::Option* o : {micro, schedule, virtual_stages})
    if (o->count() > 0 && c.pipeline_stages < 2) return fmt::format("{} needs --pipeline-stages 2 or more", o->get_name());
  if (c.pipeline_stages > 1)  // the layers: embedding, blocks, head
    if (std::string problem = examples::pipeline_split_problem(c.pipeline_schedule, c.pipeline_stages,
                                                               c.micro_batches, c.virtual_stages, c.gpt.n_layer + 2,
                                                               "GPT");
        !problem.empty())
      return problem;
  if (!c.profile_dir.empty() && c.pipeline_stages > 1) return "--profile profiles one-process or --ddp runs, not pipelines";
  if (profile_steps[2] < 1) return "--profile-steps: the active count must be at least 1";
  c.profile_wait = profile_steps[0], c.profile_warmup = profile_steps[1], c.profile_active = profile_steps[2];
  if (fsdp) {
    if (c.zero != 0 && c.zero != 3) return fmt::format("--fsdp is --zero 3; it contradicts --zero {}", c.zero);
    c.zero = 3, c.ddp = true;
  }
  if (c.zero == 1 && !c.ddp) return "--zero 1 shards the optimizer state over data-parallel ranks: add --ddp";
  if (c.zero >= 2 && !c.ddp)
    return fmt::format("--zero {} shards over data-parallel ranks: add --ddp (or use --fsdp)", c.zero);
  if (c.hsdp_shard_size > 0 && c.zero < 2) return "--hsdp-shard-size needs --fsdp (or --ddp --zero 2|3)";
  if (c.sequence_parallel && c.tp < 2) return "--sequence-parallel needs --tp 2 or more";
  if (c.sequence_parallel && c.pipeline_stages > 1) return "--sequence-parallel is not supported with --pipeline-stages";
  if (c.tp > 1 && c.zero == 1) return "--tp with --zero 1 is not supported: use --zero 2 or 3 (FSDP) with --tp";
  if ((c.tp > 1 || c.zero >= 2) && !c.profile_dir.empty()) return "--profile profiles one-process or --ddp runs";
  if (c.min_lr > c.lr) return fmt::format("--min-lr {} is above --lr {}", c.min_lr, c.lr);
  c.device = Device(device);
  if (c.device.is_cuda() && c.device.index >= device_count(DeviceType::CUDA))
    return fmt::format("--device {}: only {} CUDA device(s) present", device, device_count(DeviceType::CUDA));
  return {};
}

}  // namespace kiln::examples
