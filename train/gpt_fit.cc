// The GPT recipe on train::Trainer (see gpt_fit.h).
#include "train/gpt_fit.h"

#include <algorithm>
#include <cstdlib>

#include "amp/autocast.h"
#include "core/error.h"
#include "core/parallel.h"
#include "data/dataloader.h"
#include "data/text_corpus.h"
#include "data/token_windows.h"
#include "distributed/backend/init.h"
#include "distributed/data_parallel/zero.h"
#include "models/gpt_hf.h"
#include "models/gpt_sample.h"
#include "profiler/memory.h"
#include "train/gpt_callbacks.h"

namespace kiln::train::gpt {
using namespace models::gpt;
using namespace data::text;

namespace {

Precision precision(const std::string& amp) {
  if (amp == "bf16") return Precision::bf16;
  if (amp == "f16") return Precision::f16;
  KILN_CHECK(amp == "none", "--amp {}: the choices are none, bf16 and f16", amp);
  return Precision::f32;
}

std::shared_ptr<const std::vector<uint8_t>> shared(std::vector<uint8_t> bytes) {
  return std::make_shared<const std::vector<uint8_t>>(std::move(bytes));
}

}  // namespace

FitOptions fit_options(const TrainConfig& c, int64_t accum, std::shared_ptr<dist::ProcessGroup> pg, std::ostream& log) {
  FitOptions o;
  o.epochs = 1;  // the run's windows are one epoch
  o.max_steps = c.max_steps;
  o.optimizer = Optimizer::adamw;
  o.lr = c.lr;
  o.weight_decay = c.weight_decay;
  o.beta1 = c.beta1, o.beta2 = c.beta2;
  o.decay = [](const std::string& name, const Tensor& p) { return weight_decayed(name, p.dim()); };
  o.schedule = Schedule::warmup_cosine;
  o.warmup_steps = c.warmup_steps;
  o.min_lr = c.min_lr;
  o.precision = precision(c.amp);
  o.loss_scale = c.loss_scale;
  o.grad_accum = accum;
  o.clip_grad_norm = c.grad_clip;
  o.loss = [](const Tensor& logits, const Tensor& targets) { return GPT::loss(logits, targets); };
  o.log_every = 0;
  o.log = &log;
  o.checkpoint = c.save;
  o.save_every = c.save.empty() ? 0 : c.save_every;
  o.resume = false;  // only from --resume, never from an existing --save
  o.resume_from = c.resume;
  o.device = c.device;
  if (pg) o.strategy = DataParallel{.zero_stage = c.zero, .group = std::move(pg)};
  return o;
}

TrainResult fit(const TrainConfig& config, std::ostream& log) {
  TrainConfig c = config;
  if (c.threads > 0) set_num_threads(c.threads);
  const bool hf = !c.init_from_hf.empty();
  const int64_t t = resolve_shape(c);
  KILN_CHECK(!c.ddp || std::getenv("WORLD_SIZE") != nullptr,
             "--ddp: WORLD_SIZE is not set; start the ranks with `bazel-bin/distributed/launch/launch --nproc-per-node N -- "
             "bazel-bin/examples/gpt --ddp ...`");
  KILN_CHECK(c.zero == 0 || c.ddp, "--zero 1 shards the optimizer state over data-parallel ranks: add --ddp");
  std::shared_ptr<dist::ProcessGroup> pg;
  if (c.ddp) pg = dist::init_process_group({.backend = c.device.is_cuda() ? "nccl" : "gloo"});
  const int rank = pg ? pg->rank() : 0, world = pg ? pg->size() : 1;
  std::ostream quiet(nullptr);
  std::ostream& out = rank == 0 ? log : quiet;

  Splits bytes = split_corpus(read_corpus(c.data), t + 1);
  const int64_t micro_tokens = c.batch_size * t * world;
  const int64_t budget = c.total_batch_tokens > 0 ? c.total_batch_tokens : micro_tokens;
  KILN_CHECK(budget % micro_tokens == 0,
             "--total-batch-tokens {} is not a multiple of --batch-size x seq-len x ranks = {} x {} x {} = {}", budget,
             c.batch_size, t, world, micro_tokens);
  const int64_t accum = budget / micro_tokens;
  const int64_t eval_batches = std::min(c.eval_batches, sequential_batches(bytes.val, c.batch_size * world, t));
  KILN_CHECK(eval_batches > 0,
             "--data: the validation split ({} bytes) holds no batch of --batch-size {} x {} rank(s) x {} tokens",
             bytes.val.size(), c.batch_size, world, t);
  const auto train_bytes = static_cast<int64_t>(bytes.train.size()), val_bytes = static_cast<int64_t>(bytes.val.size());
  // Micro-batch k of the run reads windows [k, k + 1) x world x batch_size: one process the rows
  // the GPT has always drawn; under --ddp rank r every world-th of them (the same rows per step).
  const std::vector<int64_t> ids = byte_token_ids(hf);
  data::DataLoader train_loader(std::make_shared<TokenWindows>(shared(std::move(bytes.train)), ids, t,
                                                               c.max_steps * accum * world * c.batch_size,
                                                               WindowOrder::random, c.seed),
                                {.batch_size = c.batch_size});
  data::DataLoader val_loader(std::make_shared<TokenWindows>(shared(std::move(bytes.val)), ids, t,
                                                             eval_batches * world * c.batch_size, WindowOrder::sequential),
                              {.batch_size = c.batch_size});

  // On a GPU, before the model: the device peak counts every tensor of the run (the CPU's
  // allocations go uncounted: peak_rss_mb says what they cost).
  if (c.device.is_cuda()) profiler::track_memory();
  manual_seed(c.seed);
  auto model = std::make_shared<GPT>(c.gpt);
  if (hf) load_hf(*model, c.init_from_hf);
  Trainer trainer(model, fit_options(c, accum, pg, log));
  const Device device = trainer.options().device;

  TrainResult r;
  r.gpt = c.gpt;
  r.rank = rank, r.world_size = world, r.grad_accum = accum, r.tokens_per_step = budget;
  r.params = model->num_parameters();
  set_peak(c, world, r);
  if (auto* z = dynamic_cast<dist::ZeroRedundancyOptimizer*>(&trainer.optimizer()))
    out << fmt::format("ZeRO-1: {} ({} buckets), optimizer state sharded over {} ranks\n", z->name(),
                       z->reducer().buckets().size(), world);
  out << fmt::format("gpt: {} ({} layers, {} heads, {} wide, vocab {}), {:.2f}M parameters; {} train / {} val bytes; "
                     "{} tokens per step = {} x {} tokens x {} micro-steps x {} ranks; peak {:.1f} GFLOP/s ({})\n",
                     c.model, c.gpt.n_layer, c.gpt.n_head, c.gpt.n_embd, c.gpt.vocab_size, r.params / 1e6, train_bytes,
                     val_bytes, budget, c.batch_size, t, accum, world, r.peak_flops / 1e9, r.peak_description);

  trainer.add_callback(std::make_shared<RunSignature>(run_signature(c, t), out));
  auto report = std::make_shared<StepReport>(c, r, val_loader, t, budget, model->flops_per_token(t), out);
  trainer.add_callback(report);
  trainer.add_callback(std::make_shared<StopAfterSteps>(c.stop_after_steps));
  const FitResult fitted = trainer.fit(train_loader);

  if (!c.save_hf.empty() && rank == 0) {
    save_hf(*model, c.save_hf);
    out << fmt::format("wrote Hugging Face layout to {}\n", c.save_hf);
  }
  r.steps_done = fitted.steps;
  r.skipped_steps = fitted.skipped_steps;
  r.loss_scale = trainer.loss_scaler().scale();
  r.checkpoints = fitted.checkpoints;
  r.checkpoint_seconds = fitted.checkpoint_seconds;
  report->finish(device);
  if (rank == 0 && c.sample_tokens > 0) {
    amp::AutocastGuard autocast(c.amp == "f16" ? kFloat16 : kBFloat16, c.amp != "none");
    r.sample = generate(*model, c.prompt,
                        {.tokens = c.sample_tokens, .temperature = c.temperature, .top_k = c.top_k, .seed = c.seed,
                         .gpt2_bytes = hf},
                        device);
    out << "sample:\n" << r.sample << "\n";
  }
  return r;
}

}  // namespace kiln::train::gpt
