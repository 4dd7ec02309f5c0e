// The main job pipeline-parallel (see pipeline_trainer.h): the flags turned into a train::Trainer
// with the Pipeline strategy (train/fit_pipeline.h), which runs the loop; what is left here is the
// flag layer: the launch checks, the traced process group, the data, the checkpoint paths, and
// callbacks for what the flags add (--stop-after-steps/-epochs, SIGTERM, the run monitor).
#include "train/pipeline_trainer.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "core/parallel.h"
#include "data/dataloader.h"
#include "distributed/backend/init.h"
#include "distributed/debug/traced_process_group.h"
#include "models/mlp_cnn.h"
#include "profiler/memory.h"
#include "train/fit.h"
#include "train/flag_callbacks.h"
#include "train/pipeline_checkpoint.h"
#include "train/run_monitor.h"
#include "train/train_parts.h"

namespace kiln::train {
namespace {

PipelineSchedule schedule_of(const std::string& name) {
  if (name == "gpipe") return PipelineSchedule::gpipe;
  if (name == "interleaved") return PipelineSchedule::interleaved;
  KILN_CHECK(name == "1f1b", "--pipeline-schedule {}: expected gpipe, 1f1b or interleaved", name);
  return PipelineSchedule::one_f_one_b;
}

Optimizer optimizer_of(const std::string& name) {
  if (name == "adam") return Optimizer::adam;
  if (name == "adamw") return Optimizer::adamw;
  KILN_CHECK(name == "sgd", "--optimizer {}: expected sgd, adam or adamw", name);
  return Optimizer::sgd;
}

Precision precision_of(const std::string& amp) {
  if (amp == "f16") return Precision::f16;
  if (amp == "bf16") return Precision::bf16;
  KILN_CHECK(amp == "none", "--amp {}: expected none, f16 or bf16", amp);
  return Precision::f32;
}

/// --resume X --save Y: the run continues from X's stage files and writes Y's, so each rank of
/// the first replica copies its stage's file to Y's name first (atomically, before the ranks meet).
void copy_stage_file(const std::string& from, const std::string& to, int rank, int stages) {
  if (rank >= stages) return;
  const std::string src = dist::stage_checkpoint_path(from, rank, stages);
  const std::string dst = dist::stage_checkpoint_path(to, rank, stages), tmp = dst + ".tmp";
  std::filesystem::copy_file(src, tmp, std::filesystem::copy_options::overwrite_existing);
  std::filesystem::rename(tmp, dst);
}

}  // namespace

TrainResult train_pipeline(const TrainConfig& config, std::ostream& log) {
  TrainConfig c = config;
  const int P = c.pipeline_stages, M = c.micro_batches;
  const char* world_env = std::getenv("WORLD_SIZE");
  KILN_CHECK(world_env != nullptr,
             "--pipeline-stages: WORLD_SIZE is not set; start one rank per stage with `tools/bazel run "
             "//distributed/launch -- --nproc-per-node {} -- <mnist binary> --pipeline-stages {} ...`",
             P, P);
  // Before joining, so that a wrong launch fails at once on every rank instead of at rendezvous.
  const int world_size = std::atoi(world_env);
  KILN_CHECK(c.ddp ? world_size % P == 0 : world_size == P, "--pipeline-stages {}: {} ranks started; {}", P, world_size,
             c.ddp ? fmt::format("with --ddp the world must be a multiple of {} (stages x replicas)", P)
                   : fmt::format("start exactly {} (one per stage), or add --ddp for stages x replicas", P));
  const int replicas = world_size / P;
  const int rank = std::atoi(std::getenv("RANK") != nullptr ? std::getenv("RANK") : "0");
  for (int s = 0; s < P && !c.resume.empty(); ++s)
    KILN_CHECK(std::filesystem::exists(dist::stage_checkpoint_path(c.resume, s, P)), "--resume {}: {} does not exist",
               c.resume, dist::stage_checkpoint_path(c.resume, s, P));
  if (!c.resume.empty() && !c.save.empty() && c.resume != c.save) copy_stage_file(c.resume, c.save, rank, P);
  c.device = rank_device(c, "--pipeline-stages");
  if (c.threads > 0) set_num_threads(c.threads);
  Datasets sets = load_datasets(c);
  profiler::track_memory();
  // Traced (flight recorder; sends and receives on the profiler's tracks) and clock-aligned.
  std::shared_ptr<dist::ProcessGroup> world = dist::trace_process_group(dist::init_process_group(
      {.backend = c.device.is_cuda() ? "nccl" : "gloo",
       .timeout = std::chrono::milliseconds(static_cast<int64_t>(c.timeout_s * 1000))}));
  dist::align_profiler_clock(*world);
  std::ostream quiet(nullptr);
  std::ostream& out = world->rank() == 0 ? log : quiet;

  Pipeline strategy{.stages = P,
                    .micro_batches = M,
                    .schedule = schedule_of(c.pipeline_schedule),
                    .virtual_stages = c.virtual_stages,
                    .balance = c.pipeline_balance == "time" ? PipelineBalance::time : PipelineBalance::params,
                    .data_parallel = c.ddp,
                    .timeout_s = c.timeout_s,
                    .group = world};
  if (strategy.balance == PipelineBalance::time && world->rank() == 0) {  // timed on one micro-batch
    const int64_t rows = std::min(c.batch_size / M, sets.train->size());
    std::vector<int64_t> first(static_cast<size_t>(rows));
    for (int64_t i = 0; i < rows; ++i) first[static_cast<size_t>(i)] = i;
    strategy.sample = sets.train->get_batch(first).data;
  } else if (strategy.balance == PipelineBalance::time) {
    strategy.sample = zeros({1});  // read on rank 0 only
  }
  FitOptions o{.epochs = c.epochs,
               .optimizer = optimizer_of(c.optimizer),
               .lr = c.lr,
               .schedule = c.schedule == "cosine" ? Schedule::cosine : Schedule::constant,
               .precision = precision_of(c.amp),
               .master_weights = c.amp_mode == "o2",
               .log_every = c.log_every,
               .log = &log,
               .checkpoint = c.save.empty() ? c.resume : c.save,
               .save_every = c.save_every,
               .resume = !c.resume.empty() || c.auto_resume,
               .device = c.device,
               .strategy = strategy};
  // Every rank builds the whole model from the seed, as one process would; the Trainer keeps its stage.
  manual_seed(static_cast<uint64_t>(c.seed));
  Trainer trainer(models::make_model(c.model, c.dropout), o);

  // The same order as the one-process job; under --ddp the Trainer gives each replica its share.
  TrainResult r;
  int64_t rows = sets.train->size();
  if (replicas > 1) rows = data::DistributedSampler(rows, 0, replicas).size();
  const bool drop = rows % c.batch_size % M != 0;
  if (drop) {  // the pipeline cannot split it; say so rather than fail at the end of the epoch
    r.dropped_batches = 1;
    out << fmt::format(
        "pipeline: each epoch's last batch of {} images does not split into {} micro-batches; it is left out\n",
        rows % c.batch_size, M);
  }
  data::DataLoader loader(sets.train, {.batch_size = c.batch_size,
                                       .shuffle = true,
                                       .drop_last = drop,
                                       .num_workers = c.workers,
                                       .seed = static_cast<uint64_t>(c.seed)});
  data::DataLoader test(sets.test, {.batch_size = 1000});
  auto stop = std::make_shared<StopFlags>(c, world.get());
  trainer.add_callback(stop);
  // MFU needs the FLOPs of this rank's stage per sample: not computed for pipelines (0: none shown).
  trainer.add_callback(std::make_shared<MonitorSteps>(c, world->rank(), /*flops_per_sample=*/0,
                                                      Phase::kForwardBackward, c.batch_size * replicas, out));
  profiler::reset_peak(c.device.type);
  const FitResult f = trainer.fit(loader, &test);

  for (const EpochMetrics& e : f.epochs) r.epoch_train_loss.push_back(e.train_loss);
  r.step_losses = f.step_losses;
  r.test_loss = f.val_loss.value_or(0);
  r.test_accuracy = f.val_accuracy.value_or(0);
  r.samples_per_sec = f.samples_per_sec;
  r.wall_seconds = f.seconds;
  r.epochs_done = static_cast<int64_t>(f.epochs.size());
  r.skipped_steps = f.skipped_steps;
  r.preempted = stop->preempted();
  r.steps = f.steps;
  r.checkpoints = f.checkpoints;
  r.peak_memory_bytes = profiler::memory_counters(c.device.type).peak;
  r.rank = f.rank;
  r.world_size = f.world_size;
  return r;
}

}  // namespace kiln::train
