// The GPT training loop pipeline-parallel (see gpt_pipeline.h): the loop of gpt_trainer.cc with
// each batch run by dist::Pipeline, the tied head's gradients summed between the end stages, the
// norm clipped over all stages, and the last stage's losses broadcast to rank 0, which logs. Under
// --zero 2|3 a ShardedStage (gpt_pipeline_zero.h) takes DDP's place over each stage's replicas.
// Resuming, --init-from-hf and --activation-checkpointing act on the whole model every rank
// builds before the split; --save-hf reads the merged weights back into a whole model on rank 0.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>

#include <fmt/format.h>

#include "core/parallel.h"
#include "data/text_corpus.h"
#include "distributed/backend/init.h"
#include "distributed/data_parallel/scaler_sync.h"
#include "models/gpt_hf.h"
#include "models/gpt_sample.h"
#include "train/gpt_pipeline.h"
#include "train/gpt_pipeline_checkpoint.h"
#include "train/gpt_pipeline_zero.h"
#include "distributed/tensor_parallel/layers.h"
#include "models/gpt_tensor_parallel.h"
#include "train/pipeline_checkpoint.h"
#include "profiler/memory.h"

namespace kiln::train::gpt {
using namespace models::gpt;
using namespace data::text;
namespace {

void check_flags(const TrainConfig& c) {
  const int p = c.pipeline_stages;
  KILN_CHECK(c.zero != 1, "--pipeline-stages {}: --zero 1 is not supported with the pipelined GPT (each replica's "
             "stages keep their whole AdamW state); use --zero 2 or 3 (or --fsdp): each stage sharded over its "
             "data-parallel ranks", p);
  KILN_CHECK(c.zero < 2 || c.ddp, "--pipeline-stages {} --zero {}: the stages shard over their data-parallel "
             "replicas: add --ddp (or use --fsdp)", p, c.zero);
  KILN_CHECK(c.hsdp_shard_size == 0, "--pipeline-stages {}: --hsdp-shard-size {} is not supported with the pipeline "
             "(each stage shards over all of its data-parallel ranks)", p, c.hsdp_shard_size);
  const int tp = c.tp;
  const char* world = std::getenv("WORLD_SIZE");
  KILN_CHECK(world != nullptr,
             "--pipeline-stages {}: WORLD_SIZE is not set; start the stages with `bazel-bin/distributed/launch/launch "
             "--nproc-per-node {} -- bazel-bin/examples/gpt --pipeline-stages {} ...`",
             p, p * tp, p);
  // Before joining, so that a wrong launch fails at once on every rank instead of at rendezvous.
  const int n = std::atoi(world);
  KILN_CHECK(c.ddp ? n % (p * tp) == 0 : n == p * tp, "--pipeline-stages {}{}: {} ranks started; {}", p,
             tp > 1 ? fmt::format(" --tp {}", tp) : "", n,
             tp > 1 ? (c.ddp ? fmt::format("with --ddp the world must be a multiple of {} (stages x tensor = {} x {}; "
                                           "times the data-parallel replicas)", p * tp, p, tp)
                             : fmt::format("start exactly {} (stages x tensor = {} x {}), or add --ddp for data x "
                                           "pipeline x tensor", p * tp, p, tp))
                    : (c.ddp ? fmt::format("with --ddp the world must be a multiple of {} (stages x replicas)", p)
                             : fmt::format("start exactly {} (one per stage), or add --ddp for stages x replicas", p)));
  if (tp > 1) {
    models::gpt::check_tensor_parallel(c.gpt, tp);
    KILN_CHECK(4 * c.gpt.n_embd % tp == 0, "--tp {}: the MLP's {} hidden features do not divide by it", tp,
               4 * c.gpt.n_embd);
    KILN_CHECK(!c.sequence_parallel, "--sequence-parallel is not supported with --pipeline-stages (the stages pass "
               "whole sequences)");
  }
  dist::check_schedule(dist::parse_schedule(c.pipeline_schedule), p, c.micro_batches, c.virtual_stages);
  KILN_CHECK(static_cast<int64_t>(p) * c.virtual_stages <= c.gpt.n_layer + 2,
             "--pipeline-stages {} x --virtual-stages {}: the GPT has only {} layers (embedding, {} blocks, head)", p,
             c.virtual_stages, c.gpt.n_layer + 2, c.gpt.n_layer);
  KILN_CHECK(c.batch_size % c.micro_batches == 0, "--batch-size {} does not split into --micro-batches {}",
             c.batch_size, c.micro_batches);
}

}  // namespace

TrainResult train_pipeline(const TrainConfig& config, std::ostream& log) {
  TrainConfig c = config;
  const bool hf = !c.init_from_hf.empty();
  const int64_t t = resolve_shape(c);
  check_flags(c);
  if (c.threads > 0) set_num_threads(c.threads);
  auto pg = dist::init_process_group({.backend = c.device.is_cuda() ? "nccl" : "gloo"});
  // world rank = (replica x stages + stage) x tensor ranks + tensor rank
  const dist::ParallelLayout layout(pg->size(), c.tp, c.pipeline_stages);
  dist::PipelineGroups groups;
  dist::ParallelGroups groups3d;  // --tp > 1
  if (c.tp > 1) {
    groups3d = dist::make_groups(layout);
    groups = {.pipeline = groups3d.pipeline, .data = groups3d.data, .stage = groups3d.coords.pipeline,
              .replica = groups3d.coords.data};
  } else if (c.ddp) {
    groups = dist::pipeline_groups(c.pipeline_stages);
  } else {
    groups.pipeline = pg;
    groups.stage = pg->rank();
  }
  const int rank = pg->rank(), replicas = layout.data(), replica = groups.replica;
  const Device comm = c.device.is_cuda() ? c.device : kCPU;
  std::ostream quiet(nullptr);
  std::ostream& out = rank == 0 ? log : quiet;

  // Every stage of a replica reads the rows a one-process --ddp run's rank `replica` reads.
  const Splits data = split_corpus(read_corpus(c.data), t + 1);
  const std::vector<int64_t> ids = byte_token_ids(hf);
  const int64_t micro_tokens = c.batch_size * t * replicas;
  const int64_t budget = c.total_batch_tokens > 0 ? c.total_batch_tokens : micro_tokens;
  KILN_CHECK(budget % micro_tokens == 0,
             "--total-batch-tokens {} is not a multiple of --batch-size x seq-len x replicas = {} x {} x {}", budget,
             c.batch_size, t, replicas);
  const int64_t accum = budget / micro_tokens;

  // On a GPU, before the model: the device peak counts every tensor of the run (the CPU's
  // allocations go uncounted: peak_rss_mb says what they cost).
  if (c.device.is_cuda()) profiler::track_memory();
  manual_seed(c.seed);
  auto model = std::make_shared<GPT>(c.gpt);  // the whole model, initialised as in one process
  if (hf) load_hf(*model, c.init_from_hf);
  MixedPrecision mp(c.amp, "o1", c.loss_scale);
  dist::share_found_inf(mp.scaler(), pg);  // a step skipped on one stage is skipped on all
  train::TrainingState state;
  optim::StateDict resumed_optimizer;  // the one-process optimizer's state, from --resume
  if (!c.resume.empty()) {
    state = load_whole_checkpoint(c, c.resume, *model, resumed_optimizer);
    accept_resumed(c, t, state, mp, out);
  }
  const auto whole_layout = optimizer_layout(c, model->named_parameters());
  std::vector<std::pair<std::string, Shape>> whole_shapes;
  for (const auto& [name, p] : model->named_parameters()) whole_shapes.emplace_back(name, p.sizes());
  TrainResult r;
  r.gpt = c.gpt;
  r.rank = rank, r.world_size = pg->size(), r.grad_accum = accum, r.tokens_per_step = budget;
  r.params = model->num_parameters();
  const double flops_per_token = model->flops_per_token(t);
  dist::PipelineOptions o;
  o.micro_batches = c.micro_batches;
  o.schedule = dist::parse_schedule(c.pipeline_schedule);
  o.virtual_stages = c.virtual_stages;
  o.device = c.device;
  // Gradients averaged over the replicas by DDP, or under ZeRO reduce-scattered by ShardedStage.
  if (replicas > 1 && c.zero < 2) o.data_parallel_group = groups.data;
  std::shared_ptr<nn::Sequential> layers;
  if (c.tp > 1) {
    TensorParallelGPT split(*model, groups3d.tensor);  // every rank's shards, from the whole model
    layers = tensor_parallel_layers(split, groups3d.tensor);
  } else {
    layers = gpt_layers(*model);
  }
  dist::Pipeline pipe(layers, groups.pipeline, o);
  model.reset();  // this stage keeps its own layers only
  layers.reset();
  TiedHead tie = c.tp > 1 ? TiedHead(pipe, layout) : TiedHead(pipe, replicas);
  const int64_t n_layer = c.gpt.n_layer;
  nn::NamedTensors named;
  for (auto& [local, p] : pipe.stage_module().named_parameters()) {
    const std::string name = gpt_name(pipe.global_name(local), n_layer);
    named.emplace_back(name.empty() ? kHeadCopy : name, p);
  }
  // --zero 2|3: this stage's parameters sharded over its data-parallel group (gpt_pipeline_zero.h),
  // the optimizer over this rank's shards.
  std::unique_ptr<ShardedStage> zero;
  if (c.zero >= 2) zero = std::make_unique<ShardedStage>(c, named, groups.data, comm);
  std::unique_ptr<optim::AdamW> own_opt = zero ? nullptr : make_optimizer(c, named);
  optim::AdamW* opt = zero ? &zero->optimizer() : own_opt.get();
  const auto stage_layout = optimizer_layout(c, named);
  const StageOptimizerMap opt_map(whole_layout, stage_layout);
  std::vector<std::string> stage_names;  // the stage optimizer's parameters by index
  for (const auto& group : stage_layout) stage_names.insert(stage_names.end(), group.begin(), group.end());
  if (!c.resume.empty()) {
    optim::StateDict stage_state = opt_map.to_stage(resumed_optimizer);
    if (c.tp > 1) stage_state = tensor_parallel_stage_state(stage_state, stage_names, *groups3d.tensor);
    if (zero)
      zero->load_whole_state(stage_state);
    else
      opt->load_state_dict(stage_state);
    resumed_optimizer.clear();
    restore_stage_generator(pipe, state);
  }
  set_peak(c, pg->size(), r);
  out << "parallel layout: " << layout.describe();
  if (c.tp > 1)
    out << fmt::format("tensor parallel: {} ranks ({} heads, {} vocabulary rows each)\n", c.tp, c.gpt.n_head / c.tp,
                       c.gpt.vocab_size / c.tp);
  if (zero) {
    int64_t stage_params = 0;
    for (const auto& [name, p] : named) stage_params += p.numel();
    out << fmt::format("ZeRO-{} per stage: each stage's {} sharded over its {} data-parallel rank(s) (the ranks with the "
                       "same stage{} in the other replicas); gradients accumulated over the step's micro-batches and "
                       "reduce-scattered once per step; {}; stage 0 keeps {:.3f}M of its {:.3f}M parameters per rank\n",
                       c.zero, c.zero == 3 ? "parameters, gradients and AdamW's state" : "gradients and AdamW's state",
                       replicas, c.tp > 1 ? " and tensor rank" : "",
                       c.zero == 3 ? "parameters all-gathered before the step's first forward and kept for its "
                                     "micro-batches, freed after the optimizer's step"
                                   : "parameters all-gathered after the optimizer's step (replicated)",
                       zero->local_numel() / 1e6, stage_params / 1e6);
  }
  out << fmt::format("gpt: {} ({} layers, {} heads, {} wide, vocab {}), {:.2f}M parameters; pipeline: {} stages ({}), "
                     "{} micro-batches, {}{}, layers {} (embedding, blocks, head); {} tokens per step = {} x {} tokens "
                     "x {} micro-steps{}\n",
                     c.model, n_layer, c.gpt.n_head, c.gpt.n_embd, c.gpt.vocab_size, r.params / 1e6,
                     pipe.num_stages(), pg->backend(), c.micro_batches, c.pipeline_schedule,
                     c.virtual_stages > 1 ? fmt::format(" x {} virtual stages", c.virtual_stages) : "",
                     fmt::join(pipe.boundaries(), ","), budget,
                     c.batch_size, t, accum,
                     replicas > 1 ? fmt::format(" x {} data-parallel replicas", replicas) : "");

  if (c.gpt.checkpoint_activations) {  // counted where the blocks ended up, over every stage
    double mine = 0;
    for (size_t i = 0; i < pipe.stage_module().size(); ++i)
      mine += dynamic_cast<CheckpointedBlock*>(pipe.stage_module()[i].get()) != nullptr;
    Tensor n = full({1}, mine, dtype(kFloat64)).to(comm);
    groups.pipeline->allreduce(n)->wait();
    out << fmt::format("activation checkpointing: {} of {} blocks recompute their activations in backward\n",
                       n.to(kCPU).item<double>(), n_layer);
  }

  // The loss of the last stage's logits: whole, or this tensor rank's vocabulary columns.
  auto loss_of = [&](const Tensor& logits, const Tensor& y) {
    if (c.tp == 1) return GPT::loss(logits, y);
    return dist::tp::vocab_parallel_cross_entropy(logits.reshape({-1, logits.size(-1)}), y.reshape({-1}), groups3d.tensor);
  };
  // The last stage's numbers over every replica: Pipeline reduces them under DDP; under ZeRO it
  // runs each replica alone, and they are reduced here.
  auto over_replicas = [&](std::vector<double> v, dist::ReduceOp op) {
    if (!zero || replicas == 1) return v;
    Tensor t = tensor(v, {static_cast<int64_t>(v.size())}, dtype(kFloat64)).to(comm);
    groups.data->allreduce(t, op)->wait();
    return t.to(kCPU).to_vector<double>();
  };
  auto evaluate = [&]() {
    if (zero) zero->gather();  // ZeRO-3: whole again (kept for the next step)
    NoGradGuard g;
    pipe.stage_module().eval();
    // Batch i is the same rows whatever the replicas: replica r takes its r-th slice of them.
    const int64_t n = std::min(c.eval_batches, sequential_batches(data.val, c.batch_size * replicas, t));
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      Batch b = sequential_batch(data.val, ids, c.batch_size, t, i * replicas + replica);
      amp::AutocastGuard autocast = mp.autocast();
      Tensor logits = pipe.forward(pipe.is_first() ? b.x.to(c.device) : Tensor());
      if (pipe.is_last()) sum += loss_of(logits, b.y.to(c.device)).item<double>();
    }
    pipe.stage_module().train();
    const std::vector<double> all =
        over_replicas(pipe.from_last_stage({sum, static_cast<double>(n)}), dist::ReduceOp::kSum);
    return all[0] / std::max(all[1], 1.0);
  };
  // What a checkpoint saves the optimizer's state from: the stage's optimizer, or under ZeRO one
  // over the whole parameters loaded with the shards' state gathered (a collective over the data group).
  auto checkpoint_optimizer = [&]() -> std::unique_ptr<optim::AdamW> {
    if (!zero) return nullptr;
    zero->gather();
    auto whole = make_optimizer(c, named);
    whole->load_state_dict(zero->whole_state());
    return whole;
  };
  auto save = [&]() {
    if (c.save.empty()) return;
    state.extra["gpt"] = run_signature(c, t);
    mp.save(state);
    const std::unique_ptr<optim::AdamW> gathered = checkpoint_optimizer();
    const optim::Optimizer& saved = gathered ? *gathered : *opt;
    if (c.tp > 1)
      save_tensor_parallel_pipeline_checkpoint(pipe, groups3d, c.save, c, whole_shapes, whole_layout, opt_map,
                                               stage_names, saved, state);
    else if (replica == 0)
      save_pipeline_checkpoint(pipe, c.save, opt_map, saved, state);  // the replicas are equal
    r.checkpoints += 1;
    out << fmt::format("saved {} at step {} (merged: weights and optimizer state, the GPT's names)\n", c.save,
                       state.step);
  };

  StepTimes times;
  const int64_t last = c.stop_after_steps > 0 ? std::min(c.max_steps, state.step + c.stop_after_steps) : c.max_steps;
  // Under ZeRO, the gradients the norm counts (by named's index): the tied matrix once (not the
  // last stage's copy), a parameter whole on every tensor rank on tensor rank 0 only; their squares
  // summed over the data group, the stages and the tensor group.
  std::vector<bool> counted;
  for (const auto& [name, p] : named) {
    const bool copy = name == kHeadCopy && pipe.is_last() && !pipe.is_first();
    const bool replicated = c.tp > 1 && parameter_split(name == kHeadCopy ? "wte.weight" : name).dim < 0;
    counted.push_back(!copy && !(replicated && groups3d.coords.tensor != 0));
  }
  std::vector<dist::ProcessGroup*> norm_groups = {&pipe.process_group()};
  if (c.tp > 1) norm_groups.push_back(groups3d.tensor.get());
  auto loss_fn = [&](const Tensor& logits, const Tensor& y) {
    return mp.scaler().scale(loss_of(logits, y) / static_cast<double>(accum));
  };
  while (state.step < last) {
    const int64_t step = state.step;
    times.begin();
    if (zero) zero->gather();  // ZeRO-3: the whole parameters for every micro-batch of the step
    opt->zero_grad();
    double loss_sum = 0;
    for (int64_t micro = 0; micro < accum; ++micro) {
      const uint64_t row = static_cast<uint64_t>(((step * accum + micro) * replicas + replica) * c.batch_size);
      Batch b = random_batch(data.train, ids, c.batch_size, t, c.seed, row);
      amp::AutocastGuard autocast = mp.autocast();
      const double l = pipe.train_step(pipe.is_first() ? b.x.to(c.device) : Tensor(),
                                       pipe.is_last() ? b.y.to(c.device) : Tensor(), loss_fn);
      if (pipe.is_last()) loss_sum += l / mp.scaler().scale();
    }
    tie.sync_gradients();
    if (zero) zero->reduce_scatter();  // once per step, after the last micro-batch's backward
    if (mp.scaler().is_enabled()) mp.scaler().unscale_(*opt);
    const double norm = zero ? zero->clip_grad_norm(c.grad_clip, counted, norm_groups) : c.tp > 1 ? tie.clip_grad_norm(c.grad_clip, *groups3d.tensor,
                                                      [&](const std::string& global) {
                                                        const std::string name = gpt_name(global, n_layer);
                                                        return models::gpt::parameter_split(name.empty() ? "wte.weight" : name).dim < 0;
                                                      })
                                 : tie.clip_grad_norm(c.grad_clip);
    const double lr = lr_at(c, step);
    opt->set_lr(lr);
    mp.step(*opt);
    if (zero) zero->after_step();
    loss_sum = over_replicas(pipe.from_last_stage({loss_sum}, dist::ReduceOp::kAvg), dist::ReduceOp::kAvg)[0];
    const double dt = times.record(r, loss_sum, budget, c.device);
    ++state.step;
    const double tok_s = static_cast<double>(budget) / dt, mfu = flops_per_token * budget / dt / r.peak_flops;
    if (state.step % c.log_every == 0 || state.step == last)
      out << fmt::format("step {}/{} | loss {:.4f} | lr {:.3e} | norm {:.3f} | {:.0f} ms | {:.0f} tok/s | mfu {:.1f}% | "
                         "bubble {:.0f}%{}\n",
                         state.step, c.max_steps, loss_sum, lr, norm, dt * 1e3, tok_s, 100 * mfu,
                         100 * pipe.stats().wait_seconds / std::max(pipe.stats().step_seconds, 1e-12),
                         scaler_note(mp.scaler()));
    validate_if_due(c, state.step, evaluate, r, out);
    if (c.save_every > 0 && state.step % c.save_every == 0 && state.step != last) save();
  }
  if (zero) zero->gather();  // ZeRO-3: the stage's weights for --save, --save-hf and the tie's check
  save();
  const std::string merged = c.save.empty() ? c.save_hf + "/kiln-merged.tmp.safetensors" : c.save;
  if (!c.save_hf.empty() && c.save.empty() && c.tp > 1) {  // a collective over every rank
    std::error_code racing;
    std::filesystem::create_directories(c.save_hf, racing);
    const std::unique_ptr<optim::AdamW> gathered = checkpoint_optimizer();
    save_tensor_parallel_pipeline_checkpoint(pipe, groups3d, merged, c, whole_shapes, whole_layout, opt_map,
                                             stage_names, gathered ? *gathered : *opt, state);
  }
  if (!c.save_hf.empty() && replica == 0) {
    // The merged weights (--save's file, or one written for this and removed) into a whole model.
    if (c.save.empty() && c.tp == 1) {
      std::error_code racing;  // every stage makes it; the others' attempts may fail
      std::filesystem::create_directories(c.save_hf, racing);
      dist::save_merged_checkpoint(pipe, merged, state, [&](const std::string& global) { return gpt_name(global, n_layer); });
    }
    if (rank == 0) {
      GPT whole(c.gpt);
      train::load_checkpoint(merged, whole, nullptr, nullptr);
      save_hf(whole, c.save_hf);
      if (c.save.empty()) std::remove(merged.c_str());
      out << fmt::format("wrote Hugging Face layout to {}\n", c.save_hf);
    }
  }
  out << fmt::format("tied head: the last stage's copy differs from wte by at most {:.3g}\n", tie.divergence());
  r.steps_done = state.step;
  r.skipped_steps = mp.skipped_steps();
  r.loss_scale = mp.scaler().scale();
  times.finish(r, flops_per_token, c.device);
  if (c.sample_tokens > 0) out << "sample: skipped (the model is split across the stages)\n";
  return r;
}

}  // namespace kiln::train::gpt
