// The main job through train::Trainer (see trainer.h): the flags become FitOptions and a strategy
// (one process, DDP, ZeRO-1, pipeline), the run monitor and the progress lines become callbacks,
// Fashion-MNIST becomes two loaders.
#include "train/trainer.h"

#include <cstdlib>

#include <nlohmann/json.hpp>

#include "core/generator.h"
#include "core/parallel.h"
#include "data/dataloader.h"
#include "distributed/backend/gloo_backend.h"
#include "distributed/backend/init.h"
#include "distributed/backend/job_env.h"
#include "distributed/data_parallel/ddp.h"
#include "distributed/data_parallel/zero.h"
#include "distributed/debug/traced_process_group.h"
#include "models/build_model.h"
#include "profiler/memory.h"
#include "train/epoch_log.h"
#include "train/mixed_precision.h"
#include "train/pipeline_trainer.h"
#include "train/run_monitor.h"
#include "train/train_parts.h"

namespace kiln::train {
namespace {

/// --ddp and --pipeline-stages: the ranks of the launcher, srun or mpirun; traced (the flight recorder keeps the last
/// collectives, and a profiled run draws them on each rank's communication track) on a clock
/// aligned here.
std::shared_ptr<dist::ProcessGroup> join_process_group(const TrainConfig& c) {
  dist::apply_scheduler_env();  // srun / mpirun: their variables give RANK, WORLD_SIZE, ...
  KILN_CHECK(std::getenv("WORLD_SIZE") != nullptr,
             "--ddp: WORLD_SIZE is not set; start the ranks with `tools/bazel run //distributed/launch -- "
             "--nproc-per-node N -- <mnist binary> --ddp ...` (or srun, or mpirun)");
  std::shared_ptr<dist::ProcessGroup> pg = dist::trace_process_group(dist::init_process_group(
      {.backend = c.device.is_cuda() ? "nccl" : "gloo",
       .timeout = std::chrono::milliseconds(static_cast<int64_t>(c.timeout_s * 1000))}));
  dist::align_profiler_clock(*pg);
  return pg;
}

FitOptions fit_options(const TrainConfig& c, std::shared_ptr<dist::ProcessGroup> pg, const data::Dataset& train,
                       std::ostream& log) {
  FitOptions o;
  o.epochs = c.epochs;
  o.optimizer = c.optimizer;
  o.lr = c.lr;
  o.schedule = c.schedule;
  o.precision = c.amp;
  o.master_weights = c.amp_mode == AmpMode::o2;
  o.log_every = 0;  // EpochLog writes the main job's lines
  o.log = &log;
  o.epoch_lines = false;
  o.checkpoint = c.save;
  o.save_every = c.save_every;
  o.resume = c.auto_resume;  // a plain --save run starts afresh and overwrites
  o.resume_from = c.resume;
  o.stop_after_steps = c.stop_after_steps;
  o.stop_after_epochs = c.stop_after_epochs;
  o.handle_preemption = true;
  o.cuda_graph = c.cuda_graph;
  o.device = c.device;
  if (c.pipeline_stages > 1)
    o.strategy = pipeline_strategy(c, std::move(pg), train);  // one stage per rank (x replicas with --ddp)
  else if (pg)
    o.strategy = DataParallel{.zero_stage = c.zero, .zero_checkpoint = c.zero_checkpoint, .timeout_s = c.timeout_s,
                              .group = std::move(pg)};
  return o;
}

/// The data-parallel banners: ranks, buckets, the all-reduce path and ZeRO-1's sharding.
void announce_data_parallel(Trainer& trainer, const TrainConfig& c, std::ostream& out) {
  dist::ProcessGroup* pg = trainer.process_group();
  if (trainer.ddp() == nullptr) return;  // one process, or a pipeline (it has its own banner)
  out << fmt::format("data parallel: {} ranks ({}), {} gradient buckets, batch {} per rank\n", pg->size(),
                     pg->backend(), trainer.ddp()->bucket_names().size(), c.batch_size);
  dist::ProcessGroup* backend = pg;  // the group under the flight recorder's wrapper
  if (auto* traced = dynamic_cast<dist::TracedProcessGroup*>(backend)) backend = &traced->inner();
  if (auto* gloo = dynamic_cast<dist::ProcessGroupGloo*>(backend)) out << "all-reduce: " << gloo->allreduce_path() << "\n";
  if (auto* z = dynamic_cast<dist::ZeroRedundancyOptimizer*>(&trainer.optimizer()))
    out << fmt::format("ZeRO-1: {} ({} buckets), optimizer state sharded over {} ranks\n", z->name(),
                       z->reducer().buckets().size(), pg->size());
}

}  // namespace

TrainResult train(const TrainConfig& config, std::ostream& log) {
  if (const std::string problem = cuda_graph_problem(config); !problem.empty()) fail("{}", problem);
  KILN_CHECK(config.zero == 0 || config.pipeline_stages == 1,
             "--zero 1 is for data parallel alone, not with --pipeline-stages {}", config.pipeline_stages);
  KILN_CHECK(config.pipeline_stages == 1 || models::is_sequential_model(config.model),
             "--pipeline-stages {} splits a Sequential model into stages (mlp, cnn); --model {} is not one: "
             "train it in one process or with --ddp",
             config.pipeline_stages, config.model);
  TrainConfig c = config;
  profiler::track_memory();  // first: the peak counts every tensor of the run
  const MixedPrecision mp(c.amp, c.amp_mode);  // refuses o2 without f16/bf16, naming both
  KILN_CHECK(c.zero == 0 || c.zero == 1, "--zero {}: only stage 1 (optimizer state sharding) exists", c.zero);
  KILN_CHECK(c.zero == 0 || c.ddp, "--zero 1 shards the optimizer state over data-parallel ranks: add --ddp");
  const bool pipelined = c.pipeline_stages > 1;
  if (pipelined) check_pipeline_launch(c);
  if (c.ddp || pipelined) c.device = rank_device(c, pipelined ? "--pipeline-stages" : "--ddp");
  if (c.threads > 0) set_num_threads(c.threads);
  const Datasets sets = load_datasets(c);
  manual_seed(static_cast<uint64_t>(c.seed));
  nn::ModulePtr<> model = models::build_model(c.model, {.dropout = c.dropout, .width = c.width});
  std::shared_ptr<dist::ProcessGroup> pg = c.ddp || pipelined ? join_process_group(c) : nullptr;
  const int rank = pg ? pg->rank() : 0;
  // Ranks that read different data: all of them, or a pipeline's replicas.
  const int replicas = pg ? pg->size() / c.pipeline_stages : 1;
  std::ostream quiet(nullptr);
  std::ostream& out = rank == 0 ? log : quiet;  // only rank 0 speaks
  Trainer trainer(model, fit_options(c, pg, *sets.train, log));
  announce_data_parallel(trainer, c, out);
  const int64_t rows = data::DistributedSampler(sets.train->size(), 0, replicas, true, c.seed).size();
  const bool drop_last = pipelined && pipeline_drops_last_batch(c, rows);
  if (drop_last)  // the pipeline cannot split it; say so rather than fail at the end of the epoch
    out << fmt::format(
        "pipeline: each epoch's last batch of {} images does not split into {} micro-batches; it is left out\n",
        rows % c.batch_size, c.micro_batches);

  // The loaders: shuffled by the seed (under --ddp the Trainer gives each rank, or each pipeline
  // replica, its DistributedSampler share); the test set in fixed batches of 1000.
  data::DataLoader train_loader(sets.train, {.batch_size = c.batch_size, .shuffle = true, .drop_last = drop_last,
                                             .num_workers = c.workers, .seed = static_cast<uint64_t>(c.seed)});
  data::DataLoader test_loader(sets.test, {.batch_size = 1000, .shuffle = false});
  auto epoch_log = std::make_shared<EpochLog>(drop_last ? rows / c.batch_size : (rows + c.batch_size - 1) / c.batch_size,
                                              c.log_every, out);

  // FLOPs of one sample's forward, counted by the profiler's kernel hooks; in eval mode, so that
  // BatchNorm's running statistics are not moved by this sample. Not for a pipeline's stage
  // (0: no MFU shown).
  nn::Module& net = trainer.model();
  double flops = 0;
  if (!pipelined) {
    net.eval();
    flops = forward_flops([&] {
      amp::AutocastGuard autocast = mp.autocast();
      net.forward(sets.train->get_batch({0}).data.to(c.device));
    });
    net.train();
  }
  auto monitor = std::make_shared<RunMonitor>(monitor_config(c), rank, flops, c.device.is_cuda(), out);
  trainer.add_callback(epoch_log);  // first: its line precedes the monitor's breakdown
  trainer.add_callback(monitor);
  profiler::reset_peak(c.device.type);

  const FitResult f = trainer.fit(train_loader, &test_loader);
  TrainResult r;
  r.epoch_train_loss = epoch_log->epoch_train_loss();
  r.step_losses = f.step_losses;
  r.graph_replays = f.graph_replays;
  r.test_loss = epoch_log->test_loss();
  r.test_accuracy = epoch_log->test_accuracy();
  r.samples_per_sec = f.samples_per_sec;
  r.wall_seconds = f.seconds;
  r.epochs_done = static_cast<int64_t>(f.epochs.size());
  r.skipped_steps = f.skipped_steps;
  r.rank = f.rank;
  r.world_size = f.world_size;
  r.preempted = f.preempted;
  r.steps = f.steps;
  r.checkpoints = f.checkpoints;
  r.checkpoint_seconds = f.checkpoint_seconds;
  r.dropped_batches = drop_last ? 1 : 0;
  r.peak_memory_bytes = profiler::memory_counters(c.device.type).peak;
  r.mfu = monitor->mfu();
  return r;
}

std::string cuda_graph_problem(const TrainConfig& c) {
  if (!c.cuda_graph) return {};
  if (!c.device.is_cuda())
    return fmt::format("--cuda-graph needs a CUDA device (--device cuda); this run is on {}", c.device);
  if (c.ddp || c.pipeline_stages > 1)
    return "--cuda-graph runs in one process: not with --ddp or --pipeline-stages (their communication is not "
           "captured)";
  if (c.amp == Precision::f16)
    return "--cuda-graph: --amp f16's loss scaling decides on the host whether to skip each step; use --amp bf16 "
           "or none";
  if (c.optimizer != Optimizer::sgd)
    return fmt::format("--cuda-graph: --optimizer {} counts its steps on the host (bias correction), which a replay "
                       "would freeze; use --optimizer sgd",
                       name_of(kOptimizerNames, c.optimizer));
  if (c.schedule != Schedule::constant)
    return fmt::format("--cuda-graph replays the optimizer step with the learning rate it was captured with: "
                       "--schedule {} needs a new one each step; use --schedule constant",
                       name_of(kScheduleNames, c.schedule));
  if (c.dropout > 0)
    return fmt::format("--cuda-graph: --dropout {} needs a new random mask each step, and a replay repeats the "
                       "captured one",
                       c.dropout);
  if (!c.profile_dir.empty())
    return "--cuda-graph: --profile times each kernel with events, which cannot be recorded inside a graph";
  return {};
}

MonitorConfig monitor_config(const TrainConfig& c) {
  return MonitorConfig{.profile_dir = c.profile_dir,
                       .schedule = {.wait = c.profile_wait, .warmup = c.profile_warmup, .active = c.profile_active,
                                    .repeat = 1},
                       .logdir = c.logdir,
                       .peak_gflops = c.peak_gflops,
                       .log_every = c.log_every};
}

std::string result_json(const TrainConfig& c, const TrainResult& r) {
  nlohmann::ordered_json line = {
      {"model", c.model},
      {"device", c.device.str()},
      {"epochs", c.epochs},
      {"batch_size", c.batch_size},
      {"optimizer", name_of(kOptimizerNames, c.optimizer)},
      {"lr", c.lr},
      {"schedule", name_of(kScheduleNames, c.schedule)},
      {"amp", MixedPrecision(c.amp, c.amp_mode).describe()},
      {"threads", get_num_threads()},
      {"world_size", r.world_size},
      {"train_loss", r.epoch_train_loss.empty() ? 0.0 : r.epoch_train_loss.back()},
      {"test_loss", r.test_loss},
      {"test_accuracy", r.test_accuracy},
      {"samples_per_sec", r.samples_per_sec},
      {"wall_seconds", r.wall_seconds},
      {"skipped_steps", r.skipped_steps},
      {"steps", r.steps},
      {"checkpoints", r.checkpoints},
      {"checkpoint_seconds", r.checkpoint_seconds},
      {"preempted", r.preempted},
      {"peak_memory_bytes", r.peak_memory_bytes},
      {"cuda_graph", c.cuda_graph},
  };
  if (c.model == "resnet18") line["width"] = c.width;
  if (c.cuda_graph) line["graph_replays"] = r.graph_replays;
  if (r.mfu >= 0) line["mfu"] = r.mfu;
  if (c.pipeline_stages > 1) {
    line["pipeline_stages"] = c.pipeline_stages;
    line["micro_batches"] = c.micro_batches;
    line["pipeline_schedule"] = c.pipeline_schedule;
    line["virtual_stages"] = c.virtual_stages;
    line["dropped_batches"] = r.dropped_batches;
  }
  return line.dump();
}

}  // namespace kiln::train
