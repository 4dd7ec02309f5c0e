// The GPT training loop with sharded weights (see gpt_sharded.h): the loop of gpt_trainer.cc over
// a tensor-parallel and/or fully sharded model, the groups from one ParallelLayout.
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <optional>

#include "core/parallel.h"
#include "data/text_corpus.h"
#include "distributed/backend/init.h"
#include "distributed/data_parallel/scaler_sync.h"
#include "models/gpt_hf.h"
#include "models/gpt_sample.h"
#include "train/gpt_pipeline_checkpoint.h"
#include "train/gpt_sharded.h"
#include "train/run_monitor.h"
#include "profiler/memory.h"

namespace kiln::train::gpt {
using namespace models::gpt;
using namespace data::text;
namespace {

using Clock = std::chrono::steady_clock;

std::string strategy_name(const TrainConfig& c, int data) {
  if (c.hsdp_shard_size > 0)
    return fmt::format("HSDP: ZeRO-{} within {} shard group(s) of {} rank(s), replicated across them", c.zero,
                       data / c.hsdp_shard_size, c.hsdp_shard_size);
  if (c.zero == 3) return "ZeRO-3 (FSDP full shard: parameters, gradients and AdamW's state)";
  if (c.zero == 2) return "ZeRO-2 (FSDP shard-grad-op: gradients and AdamW's state; parameters kept from forward to backward)";
  return c.ddp ? "replicated, gradients all-reduced (DDP)" : "none";
}

/// The whole GPT on this rank, as one process would start it (and resumed from c.resume).
std::shared_ptr<GPT> whole_model(const TrainConfig& c) {
  manual_seed(c.seed);
  auto model = std::make_shared<GPT>(c.gpt);
  if (!c.init_from_hf.empty()) load_hf(*model, c.init_from_hf);
  return model;
}

/// The GPT of the one-process trainer with `weights` (on rank 0, for --save, --save-hf and the
/// sample); the generator is left as it was (a GPT draws its initial weights).
std::unique_ptr<GPT> gpt_with(const TrainConfig& c, const nn::StateDict& weights) {
  const GeneratorState g = default_generator().state();
  auto model = std::make_unique<GPT>(c.gpt);
  default_generator().set_state(g);
  model->load_state_dict(weights);
  return model;
}

}  // namespace

void wrap_sharded(ShardedGPT& m, const TrainConfig& c, const dist::ParallelLayout& layout, std::shared_ptr<GPT> whole) {
  std::shared_ptr<nn::Module> local;
  if (c.tp > 1) {
    m.tp = std::make_shared<TensorParallelGPT>(*whole, m.groups.tensor, c.sequence_parallel);
    local = m.tp;
  } else {
    m.whole = whole;
    local = whole;
  }
  whole.reset();
  if (c.zero >= 2) {
    dist::FsdpOptions options{
        .units = {"h"},
        .strategy = c.zero == 3 ? dist::ShardingStrategy::kFullShard : dist::ShardingStrategy::kShardGradOp};
    // --amp under FSDP: every unit gathered in bf16/f16 from the f32 shards, gradients reduced in f32.
    if (c.amp != "none") options.param_dtype = c.amp == "f16" ? kFloat16 : kBFloat16;
    std::shared_ptr<dist::ProcessGroup> shard_group = m.groups.data;
    if (c.hsdp_shard_size > 0) {
      std::vector<std::vector<int>> data_groups;  // every data group of the layout, on every rank
      for (int r = 0; r < layout.world(); ++r)
        if (layout.coords(r).data == 0) data_groups.push_back(layout.data_ranks(r));
      const dist::HsdpGroups hsdp = dist::hsdp_groups(data_groups, c.hsdp_shard_size);
      shard_group = hsdp.shard;
      options.replicate = hsdp.replicate;
    }
    m.fsdp = std::make_shared<dist::FullyShardedDataParallel>(local, shard_group, options);
  } else if (c.ddp && layout.data() > 1) {
    m.ddp = std::make_shared<dist::DistributedDataParallel>(local, m.groups.data);
  }
}

bool is_sharded(const TrainConfig& c) { return c.tp > 1 || c.zero >= 2 || c.hsdp_shard_size > 0; }

dist::ParallelLayout sharded_layout(const TrainConfig& c, int world) {
  KILN_CHECK(c.tp >= 1, "--tp {}: the tensor-parallel size must be at least 1", c.tp);
  KILN_CHECK(c.zero >= 0 && c.zero <= 3, "--zero {}: the stages are 1, 2 and 3", c.zero);
  KILN_CHECK(c.pipeline_stages == 1, "--pipeline-stages {} --tp {} --zero {}: the pipelined trainer runs this layout "
             "(gpt_pipeline.h; its ZeRO-2/3: gpt_pipeline_zero.h), not the sharded one", c.pipeline_stages, c.tp,
             c.zero);
  KILN_CHECK(!(c.tp > 1 && c.zero == 1),
             "--tp {} with --zero 1: ZeRO-1's sharded optimizer is not supported with tensor parallelism; use --zero 2 "
             "or 3 (FSDP over the data-parallel ranks) with --tp", c.tp);
  KILN_CHECK(c.zero < 2 || c.ddp, "--zero {} shards over data-parallel ranks: add --ddp (or use --fsdp)", c.zero);
  KILN_CHECK(c.hsdp_shard_size == 0 || c.zero >= 2,
             "--hsdp-shard-size {} shards FSDP's units within groups: add --fsdp (or --ddp --zero 2|3)",
             c.hsdp_shard_size);
  KILN_CHECK(!(c.zero >= 2 && c.gpt.checkpoint_activations),
             "--zero {}: --activation-checkpointing is not supported under FSDP (a recomputed block would be freed "
             "under its backward)", c.zero);
  KILN_CHECK(!c.sequence_parallel || c.tp > 1, "--sequence-parallel needs --tp 2 or more");
  KILN_CHECK(c.profile_dir.empty(), "--profile profiles one-process or --ddp runs, not --tp or --zero {}", c.zero);
  GPTConfig g = c.gpt;
  check_tensor_parallel(g, c.tp);  // heads, vocabulary
  KILN_CHECK(4 * g.n_embd % c.tp == 0, "--tp {}: the MLP's {} hidden features (4 x n_embd {}) do not divide by it",
             c.tp, 4 * g.n_embd, g.n_embd);
  KILN_CHECK(world % c.tp == 0, "--tp {}: the world of {} ranks is not data x tensor for any data size (start a "
             "multiple of {} ranks)", c.tp, world, c.tp);
  KILN_CHECK(c.hsdp_shard_size == 0 || (c.hsdp_shard_size >= 1 && world / c.tp % c.hsdp_shard_size == 0),
             "--hsdp-shard-size {} does not divide the {} data-parallel ranks (world {} / tensor {}): use a divisor "
             "of {}", c.hsdp_shard_size, world / c.tp, world, c.tp, world / c.tp);
  KILN_CHECK(c.ddp || world == c.tp,
             "--tp {}: {} ranks started; without --ddp start exactly {} (one per tensor rank), or add --ddp for data "
             "{} x tensor {}", c.tp, world, c.tp, world / c.tp, c.tp);
  return dist::ParallelLayout(world, c.tp, 1);
}

TrainResult train_sharded(const TrainConfig& config, std::ostream& log) {
  TrainConfig c = config;
  if (c.threads > 0) set_num_threads(c.threads);
  const bool hf = !c.init_from_hf.empty();
  const int64_t t = resolve_shape(c);
  const char* world_env = std::getenv("WORLD_SIZE");
  KILN_CHECK(world_env != nullptr,
             "--tp/--zero: WORLD_SIZE is not set; start the ranks with `bazel-bin/distributed/launch/launch "
             "--nproc-per-node N -- bazel-bin/examples/gpt --tp T ...`");
  // Before joining, so that a wrong launch fails at once on every rank instead of at rendezvous.
  const dist::ParallelLayout layout = sharded_layout(c, std::atoi(world_env));
  auto pg = dist::init_process_group({.backend = c.device.is_cuda() ? "nccl" : "gloo"});
  const int rank = pg->rank();
  std::ostream quiet(nullptr);
  std::ostream& out = rank == 0 ? log : quiet;

  ShardedGPT m;
  m.groups = dist::make_groups(layout);
  m.comm = c.device.is_cuda() ? c.device : kCPU;
  const int data = layout.data(), data_rank = m.groups.coords.data;

  const Splits corpus = split_corpus(read_corpus(c.data), t + 1);
  const std::vector<int64_t> ids = byte_token_ids(hf);
  const int64_t micro_tokens = c.batch_size * t * data;
  const int64_t budget = c.total_batch_tokens > 0 ? c.total_batch_tokens : micro_tokens;
  KILN_CHECK(budget % micro_tokens == 0,
             "--total-batch-tokens {} is not a multiple of --batch-size x seq-len x data ranks = {} x {} x {} = {}",
             budget, c.batch_size, t, data, micro_tokens);
  const int64_t accum = budget / micro_tokens;

  if (c.device.is_cuda()) profiler::track_memory();
  std::shared_ptr<GPT> whole = whole_model(c);
  MixedPrecision mp(c.amp, "o1", c.loss_scale);
  dist::share_found_inf(mp.scaler(), pg);  // a step skipped on one rank is skipped on all
  train::TrainingState state;
  optim::StateDict resumed_optimizer;  // the one-process optimizer's state, from --resume
  if (!c.resume.empty()) {
    state = load_whole_checkpoint(c, c.resume, *whole, resumed_optimizer);
    accept_resumed(c, t, state, mp, out);
  }
  whole->to(c.device);
  const nn::NamedTensors whole_named = whole->named_parameters();
  for (const auto& [name, p] : whole_named) m.names.push_back(name);
  m.layout = optimizer_layout(c, whole_named);
  for (const auto& [key, v] : make_optimizer(c, whole_named)->state_dict())
    if (key.starts_with("param_groups.")) m.whole_groups[key] = v;
  TrainResult r;
  r.gpt = c.gpt;
  r.rank = rank, r.world_size = pg->size(), r.grad_accum = accum, r.tokens_per_step = budget;
  r.params = whole->num_parameters();
  const double flops_per_token = whole->flops_per_token(t);

  wrap_sharded(m, c, layout, std::move(whole));  // this rank keeps its shards only
  auto opt = make_sharded_optimizer(c, m);
  if (!c.resume.empty()) {
    if (!resumed_optimizer.empty()) opt->load_state_dict(local_optimizer_state(m, resumed_optimizer, *opt));
    resumed_optimizer.clear();
    default_generator().set_state(state.rng);  // the split drew no numbers the saved run had not
  }

  set_peak(c, pg->size(), r);
  int64_t local_params = 0;
  if (m.fsdp)
    for (const Tensor& s : m.fsdp->shards()) local_params += s.numel();
  else
    local_params = m.model().num_parameters();
  out << "parallel layout: " << layout.describe();
  out << fmt::format("tensor parallel: {}{}; data parallel over {} rank(s): {}; {:.3f}M of the {:.3f}M parameters on "
                     "each rank\n",
                     c.tp > 1 ? fmt::format("{} ranks ({} heads, {} vocabulary rows each)", c.tp, c.gpt.n_head / c.tp,
                                            c.gpt.vocab_size / c.tp)
                              : std::string("off"),
                     c.sequence_parallel ? ", sequence parallel" : "", data, strategy_name(c, data), local_params / 1e6,
                     r.params / 1e6);
  if (m.fsdp && mp.enabled())
    out << fmt::format("FSDP mixed precision: parameters gathered in {} from f32 shards, gradients reduce-scattered in "
                       "f32\n", c.amp);
  out << fmt::format("gpt: {} ({} layers, {} heads, {} wide, vocab {}), {:.2f}M parameters; {} train / {} val bytes; "
                     "{} tokens per step = {} x {} tokens x {} micro-steps x {} data ranks; peak {:.1f} GFLOP/s ({})\n",
                     c.model, c.gpt.n_layer, c.gpt.n_head, c.gpt.n_embd, c.gpt.vocab_size, r.params / 1e6,
                     corpus.train.size(), corpus.val.size(), budget, c.batch_size, t, accum, data, r.peak_flops / 1e9,
                     r.peak_description);

  nn::Module& eval_net = m.fsdp ? static_cast<nn::Module&>(*m.fsdp) : m.model();  // no DDP: no backward follows
  auto evaluate = [&]() {
    NoGradGuard g;
    eval_net.eval();
    // Batch i is the same rows whatever the data size: data rank d takes its d-th slice of them.
    const int64_t n = std::min(c.eval_batches, sequential_batches(corpus.val, c.batch_size * data, t));
    double sum = 0, count = 0;
    for (int64_t i = 0; i < n; ++i) {
      Batch b = sequential_batch(corpus.val, ids, c.batch_size, t, i * data + data_rank);
      amp::AutocastGuard autocast = mp.autocast();
      sum += m.loss(eval_net(b.x.to(c.device)), b.y.to(c.device)).item<double>();
      count += 1;
    }
    eval_net.train();
    Tensor s = tensor({sum, count}, dtype(kFloat64)).to(m.comm);
    m.groups.data->allreduce(s)->wait();
    auto v = s.to(kCPU).to_vector<double>();
    return v[0] / std::max(v[1], 1.0);
  };
  auto save = [&]() {
    if (c.save.empty()) return;
    const Clock::time_point start = Clock::now();
    state.rng = default_generator().state();
    state.extra["gpt"] = run_signature(c, t);
    mp.save(state);
    const nn::StateDict weights = whole_weights(m);  // collectives: every rank
    const optim::StateDict opt_state = whole_optimizer_state(m, *opt);
    if (rank == 0) train::save_checkpoint(c.save, *gpt_with(c, weights), opt_state, opt->name(), state);
    pg->barrier()->wait();
    r.checkpoints += 1;
    r.checkpoint_seconds += seconds_since(start);
    out << fmt::format("saved {} at step {} (gathered: the one-process trainer's format)\n", c.save, state.step);
  };

  StepTimes times;
  const int64_t last = c.stop_after_steps > 0 ? std::min(c.max_steps, state.step + c.stop_after_steps) : c.max_steps;
  while (state.step < last) {
    const int64_t step = state.step;
    times.begin();
    opt->zero_grad();
    double loss_sum = 0;
    for (int64_t micro = 0; micro < accum; ++micro) {
      const uint64_t row = static_cast<uint64_t>(((step * accum + micro) * data + data_rank) * c.batch_size);
      Batch b = random_batch(corpus.train, ids, c.batch_size, t, c.seed, row);
      std::optional<dist::DistributedDataParallel::NoSyncGuard> no_sync;
      if (m.ddp && micro + 1 < accum) no_sync.emplace(*m.ddp);  // all-reduce once, on the last
      Tensor loss;
      {
        amp::AutocastGuard autocast = mp.autocast();
        loss = m.loss(m.net()(b.x.to(c.device)), b.y.to(c.device)) / static_cast<double>(accum);
      }
      mp.backward(loss);
      loss_sum += loss.item<double>();
    }
    if (mp.scaler().is_enabled()) mp.scaler().unscale_(*opt);
    const double norm = clip_sharded_grad_norm(m, c.grad_clip);
    const double lr = lr_at(c, step);
    opt->set_lr(lr);
    mp.step(*opt);
    Tensor l = tensor({loss_sum}, dtype(kFloat64)).to(m.comm);
    m.groups.data->allreduce(l, dist::ReduceOp::kAvg)->wait();
    loss_sum = l.to(kCPU).item<double>();
    const double dt = times.record(r, loss_sum, budget, c.device);
    ++state.step;
    const double tok_s = static_cast<double>(budget) / dt, mfu = flops_per_token * budget / dt / r.peak_flops;
    if (state.step % c.log_every == 0 || state.step == last)
      out << fmt::format("step {}/{} | loss {:.4f} | lr {:.3e} | norm {:.3f} | {:.0f} ms | {:.0f} tok/s | mfu {:.1f}%{}\n",
                         state.step, c.max_steps, loss_sum, lr, norm, dt * 1e3, tok_s, 100 * mfu,
                         scaler_note(mp.scaler()));
    validate_if_due(c, state.step, evaluate, r, out);
    if (c.save_every > 0 && state.step % c.save_every == 0 && state.step != last) save();
  }
  save();
  if (!c.save_hf.empty() || c.sample_tokens > 0) {
    const nn::StateDict weights = whole_weights(m);  // a collective
    if (rank == 0) {
      std::unique_ptr<GPT> gathered = gpt_with(c, weights);
      gathered->to(c.device);
      if (!c.save_hf.empty()) {
        save_hf(*gathered, c.save_hf);
        out << fmt::format("wrote Hugging Face layout to {}\n", c.save_hf);
      }
      if (c.sample_tokens > 0) {
        amp::AutocastGuard autocast = mp.autocast();
        r.sample = generate(*gathered, c.prompt,
                            {.tokens = c.sample_tokens, .temperature = c.temperature, .top_k = c.top_k, .seed = c.seed,
                             .gpt2_bytes = hf},
                            c.device);
        out << "sample:\n" << r.sample << "\n";
      }
    }
  }
  r.steps_done = state.step;
  r.skipped_steps = mp.skipped_steps();
  r.loss_scale = mp.scaler().scale();
  times.finish(r, flops_per_token, c.device);
  return r;
}

}  // namespace kiln::train::gpt
