// The main job's pipeline-parallel training loop (see pipeline_trainer.h): the same model, data
// order, optimizer and schedule as the one-process loop in trainer.cc, with each step run by
// dist::Pipeline and the metrics computed on the last stage and broadcast up the pipeline.
#include "train/pipeline_trainer.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <tuple>

#include "core/parallel.h"
#include "data/dataloader.h"
#include "distributed/backend/init.h"
#include "distributed/data_parallel/scaler_sync.h"
#include "distributed/debug/traced_process_group.h"
#include "distributed/pipeline/pipeline.h"
#include "distributed/pipeline/pipeline_balance.h"
#include "models/mlp_cnn.h"
#include "train/mixed_precision.h"
#include "train/pipeline_checkpoint.h"
#include "train/run_monitor.h"
#include "train/train_parts.h"
#include "optim/lr_scheduler.h"
#include "profiler/memory.h"

namespace kiln::train {
namespace {

using Clock = std::chrono::steady_clock;

/// Test loss and accuracy: each replica runs its slice of the test set through the stages; the
/// last stages add up their sums over the replicas and send the result up their pipelines.
std::pair<double, double> evaluate(dist::Pipeline& pipe, const data::TensorDataset& ds, dist::ProcessGroup* data_pg) {
  const int replica = data_pg ? data_pg->rank() : 0, replicas = data_pg ? data_pg->size() : 1;
  const int64_t n = ds.size(), lo = n * replica / replicas, hi = n * (replica + 1) / replicas;
  pipe.stage_module().eval();
  double loss_sum = 0, correct = 0;
  for (int64_t i = lo; i < hi; i += 1000) {
    const int64_t rows = std::min<int64_t>(1000, hi - i);
    Tensor logits = pipe.forward(pipe.is_first() ? ds.data().narrow(0, i, rows) : Tensor());
    if (!pipe.is_last()) continue;
    Tensor y = ds.targets().narrow(0, i, rows).to(logits.device());
    loss_sum += nn::functional::cross_entropy(logits, y, nn::functional::Reduction::sum).item<double>();
    correct += static_cast<double>((logits.argmax(1) == y).sum().item<int64_t>());
  }
  pipe.stage_module().train();
  const std::vector<double> sums = pipe.from_last_stage({loss_sum, correct});
  return {sums[0] / static_cast<double>(n), sums[1] / static_cast<double>(n)};
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
  c.device = rank_device(c, "--pipeline-stages");
  if (c.threads > 0) set_num_threads(c.threads);
  Datasets sets = load_datasets(c);
  profiler::track_memory();
  // Traced (flight recorder; sends and receives on the profiler's tracks) and clock-aligned.
  std::shared_ptr<dist::ProcessGroup> world = dist::trace_process_group(dist::init_process_group(
      {.backend = c.device.is_cuda() ? "nccl" : "gloo",
       .timeout = std::chrono::milliseconds(static_cast<int64_t>(c.timeout_s * 1000))}));
  dist::align_profiler_clock(*world);
  const Device comm = world->backend() == "nccl" ? c.device : kCPU;
  dist::PipelineGroups groups;
  if (c.ddp) {
    groups = dist::pipeline_groups(P);
  } else {
    groups.pipeline = world;
    groups.stage = world->rank();
  }
  const int replicas = world->size() / P;

  // Every rank builds the whole model from the seed, as one process would, and keeps its stage.
  manual_seed(static_cast<uint64_t>(c.seed));
  auto model = models::make_model(c.model, c.dropout);
  MixedPrecision mp(c.amp, c.amp_mode);
  mp.prepare_model(*model);
  dist::PipelineOptions po;
  po.micro_batches = M;
  po.schedule = dist::parse_schedule(c.pipeline_schedule);
  po.virtual_stages = c.virtual_stages;
  po.device = c.device;
  if (replicas > 1) po.data_parallel_group = groups.data;
  if (c.pipeline_balance == "time") {
    // Timed where the stages will run, on one micro-batch; over the world group, so every replica
    // cuts alike.
    model->to(c.device);
    const int64_t rows = std::min(c.batch_size / M, sets.train->size());
    std::vector<int64_t> first(static_cast<size_t>(rows));
    for (int64_t i = 0; i < rows; ++i) first[static_cast<size_t>(i)] = i;
    Tensor sample = world->rank() == 0 ? sets.train->get_batch(first).data.to(c.device) : Tensor();
    po.boundaries = dist::time_balanced_boundaries(*model, sample, P * c.virtual_stages, *world);
  }
  dist::Pipeline pipe(model, groups.pipeline, po);
  KILN_CHECK(!pipe.parameters().empty(),
             "--pipeline-stages {}{}: stage {}'s layers hold no parameters (split at [{}]), so it has nothing to "
             "train; use fewer stages{}",
             P, c.virtual_stages > 1 ? fmt::format(" --virtual-stages {}", c.virtual_stages) : "", pipe.stage(),
             fmt::join(pipe.boundaries(), ", "), c.virtual_stages > 1 ? " or virtual stages" : "");
  auto opt = make_optimizer(c, pipe.parameters());
  mp.prepare_optimizer(*opt);
  dist::share_found_inf(mp.scaler(), world);  // a skip on any stage or replica is a skip on all
  auto ce = [&](const Tensor& out, const Tensor& y) {
    return mp.scaler().scale(nn::functional::cross_entropy(out, y));
  };

  std::ostream quiet(nullptr);
  std::ostream& out = world->rank() == 0 ? log : quiet;
  train::TrainingState state;
  if (c.auto_resume && c.resume.empty()) {
    bool all = true;
    for (int stage = 0; stage < P; ++stage)
      all = all && std::filesystem::exists(dist::stage_checkpoint_path(c.save, stage, P));
    if (all) c.resume = c.save;
  }
  if (!c.resume.empty()) {  // every replica reads the first replica's stage files
    state = dist::load_stage_checkpoint(pipe, c.resume, opt.get());
    // Each stage writes its own file: a job killed while they saved can leave them at different
    // steps, and resuming from such a set would train a model no run ever had.
    Tensor steps = tensor({static_cast<double>(state.step), -static_cast<double>(state.step)}, dtype(kFloat64)).to(comm);
    world->allreduce(steps, dist::ReduceOp::kMax)->wait();
    const auto range = steps.to(kCPU).to_vector<double>();
    KILN_CHECK(range[0] == -range[1],
               "--resume {}: the stage files hold different steps (from {} to {}; this stage's is {}): the run was "
               "stopped while its stages saved; resume from a complete set",
               c.resume, static_cast<int64_t>(-range[1]), static_cast<int64_t>(range[0]), state.step);
    mp.load(state);
    out << fmt::format("resumed from {} at epoch {} batch {} (step {})\n", c.resume, state.epoch, state.batch,
                       state.step);
  }
  const auto& b = pipe.boundaries();
  out << fmt::format("pipeline: {} stages ({}), {} micro-batches, {}{}, layers split at [{}] (by {}){}\n", P,
                     world->backend(), M, c.pipeline_schedule,
                     c.virtual_stages > 1 ? fmt::format(" x {} virtual stages", c.virtual_stages) : "",
                     fmt::join(b, ", "), c.pipeline_balance,
                     replicas > 1 ? fmt::format(", {} data-parallel replicas", replicas) : "");

  // The same order as the one-process job: a shuffled loader, or a replica's DistributedSampler.
  data::DataLoaderOptions lo{.batch_size = c.batch_size,
                             .shuffle = replicas == 1,
                             .drop_last = false,
                             .num_workers = c.workers,
                             .seed = static_cast<uint64_t>(c.seed)};
  int64_t rows = sets.train->size();
  if (replicas > 1) {
    auto sampler = std::make_shared<data::DistributedSampler>(rows, groups.replica, replicas, /*shuffle=*/true,
                                                              static_cast<uint64_t>(c.seed));
    rows = sampler->size();
    lo.sampler = sampler;
  }
  TrainResult r;
  if (const int64_t last = rows % c.batch_size; last % M != 0) {
    lo.drop_last = true;  // the pipeline cannot split it; say so rather than fail at the end of the epoch
    r.dropped_batches = 1;
    out << fmt::format(
        "pipeline: each epoch's last batch of {} images does not split into {} micro-batches; it "
        "is left out\n",
        last, M);
  }
  data::DataLoader loader(sets.train, lo);
  const int64_t total_steps = c.epochs * loader.size();
  optim::CosineAnnealingLR cosine(*opt, std::max<int64_t>(total_steps, 1));
  // MFU needs the FLOPs of this rank's stage per sample: not computed for pipelines (0: none shown).
  RunMonitor monitor(monitor_config(c), world->rank(), /*flops_per_sample=*/0, c.device.is_cuda(), out);
  profiler::reset_peak(c.device.type);
  const auto start = Clock::now();
  double train_seconds = 0;
  int64_t samples = 0, run_steps = 0;
  StepCheckpoints checkpoints(c, world.get());  // every stage and replica stops after the same step
  auto save = [&](int64_t epoch, int64_t batch) {
    const auto t0 = Clock::now();
    state.epoch = epoch;
    state.batch = batch;
    state.rng = default_generator().state();
    mp.save(state);
    // One file per stage ("run.stage1-of-2.safetensors"), written by the first replica only.
    if (groups.replica == 0) dist::save_stage_checkpoint(pipe, c.save, opt.get(), state);
    ++r.checkpoints;
    r.checkpoint_seconds += seconds_since(t0);
  };
  const int64_t first_epoch = state.epoch, first_batch = state.batch;
  const int64_t last_epoch = c.stop_after_epochs > 0 ? std::min(c.epochs, first_epoch + c.stop_after_epochs) : c.epochs;
  for (int64_t epoch = first_epoch; epoch < last_epoch && !r.preempted; ++epoch) {
    loader.set_epoch(epoch);
    int64_t batch_no = epoch == first_epoch ? first_batch : 0;
    loader.set_start_batch(batch_no);
    EpochProgress progress(epoch, loader.size(), c.log_every, out);
    bool stop = false;
    monitor.step_begin();
    for (data::Example& batch : loader) {
      monitor.data_ready();
      opt->zero_grad();
      double l;
      {
        profiler::RecordFunction range("pipeline step");
        amp::AutocastGuard autocast = mp.autocast();
        l = pipe.train_step(pipe.is_first() ? batch.data : Tensor(), pipe.is_last() ? batch.target : Tensor(), ce);
      }
      monitor.mark(Phase::kForwardBackward);
      l /= mp.scaler().scale();  // NaN except on the last stage
      const double lr = c.schedule == "cosine" ? cosine.lr_at(state.step, c.lr) : c.lr;
      {
        profiler::RecordFunction range("optimizer");
        opt->set_lr(lr);
        mp.step(*opt);
      }
      monitor.mark(Phase::kOptimizer);
      if (pipe.is_last()) r.step_losses.push_back(l);
      ++state.step;
      // The loss lives on the last stage: it comes up the pipeline only for the lines rank 0 prints.
      double shown = std::numeric_limits<double>::quiet_NaN();  // the loss, where a line brought it up
      progress.step(batch.target.size(0) * replicas, pipe.is_last() ? l : 0, [&](double v) {
        return shown = pipe.from_last_stage({v}, dist::ReduceOp::kAvg)[0];
      });
      monitor.step_end(batch.target.size(0) * replicas, shown, lr, -1, mp.scaler().scale());
      ++run_steps;
      ++batch_no;
      const StepCheckpoints::Action act = checkpoints.after_step(state.step, run_steps);
      if (act.save) save(epoch, batch_no);
      if ((stop = act.stop)) break;
    }
    train_seconds += progress.finish();
    samples += progress.samples();
    if (stop) {
      world->barrier()->wait();  // every stage's file is written before any rank exits
      r.preempted = checkpoints.preempted();
      out << (r.preempted ? "preempted: stopped after step " : "stopped after step ") << state.step << "\n";
      break;
    }
    r.epoch_train_loss.push_back(pipe.from_last_stage({progress.mean_loss()}, dist::ReduceOp::kAvg)[0]);
    std::tie(r.test_loss, r.test_accuracy) = evaluate(pipe, *sets.test, replicas > 1 ? groups.data.get() : nullptr);
    ++r.epochs_done;
    progress.done(r.epoch_train_loss.back(), r.test_loss, r.test_accuracy);
    monitor.test_metrics(r.test_loss, r.test_accuracy, state.step);
    if (!c.save.empty()) save(epoch + 1, 0);
  }
  r.steps = state.step;
  r.wall_seconds = seconds_since(start);
  r.samples_per_sec = train_seconds > 0 ? static_cast<double>(samples) / train_seconds : 0;
  r.skipped_steps = mp.skipped_steps();
  r.peak_memory_bytes = profiler::memory_counters(c.device.type).peak;
  r.rank = world->rank();
  r.world_size = world->size();
  return r;
}

}  // namespace kiln::train
