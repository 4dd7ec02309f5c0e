// The main job's pipeline-parallel training loop (see pipeline_trainer.h): the same model, data
// order, optimizer and schedule as the one-process loop in trainer.cc, with each step run by
// dist::Pipeline and the metrics computed on the last stage and broadcast up the pipeline.
#include "examples/pipeline_trainer.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <tuple>

#include "core/parallel.h"
#include "data/dataloader.h"
#include "distributed/init.h"
#include "distributed/pipeline.h"
#include "distributed/pipeline_balance.h"
#include "distributed/pipeline_checkpoint.h"
#include "distributed/scaler_sync.h"
#include "examples/mixed_precision.h"
#include "examples/models.h"
#include "examples/train_parts.h"
#include "optim/lr_scheduler.h"

namespace kiln::examples {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

/// The values `v` of the last stage, on every stage of the pipeline.
std::vector<double> from_last_stage(dist::ProcessGroup& pipeline, Device comm, std::vector<double> v) {
  Tensor t = tensor(v).to(comm);
  pipeline.broadcast(t, pipeline.size() - 1)->wait();
  return t.to(kCPU).to_vector<double>();
}

/// Test loss and accuracy: each replica runs its slice of the test set through the stages; the
/// last stages add up their sums over the replicas and send the result up their pipelines.
std::pair<double, double> evaluate(dist::Pipeline& pipe, const data::MnistDataset& ds, dist::ProcessGroup* data_pg,
                                   Device comm) {
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
  std::vector<double> sums{loss_sum, correct};
  if (pipe.is_last() && data_pg) {
    Tensor t = tensor(sums).to(comm);
    data_pg->allreduce(t)->wait();
    sums = t.to(kCPU).to_vector<double>();
  }
  sums = from_last_stage(pipe.process_group(), comm, sums);
  return {sums[0] / static_cast<double>(n), sums[1] / static_cast<double>(n)};
}

}  // namespace

TrainResult train_pipeline(const TrainConfig& config, std::ostream& log) {
  TrainConfig c = config;
  const int P = c.pipeline_stages, M = c.micro_batches;
  const char* world_env = std::getenv("WORLD_SIZE");
  KILN_CHECK(world_env != nullptr,
             "--pipeline-stages: WORLD_SIZE is not set; start one rank per stage with `tools/bazel run "
             "//distributed:launch -- --nproc-per-node {} -- <mnist binary> --pipeline-stages {} ...`",
             P, P);
  // Before joining, so that a wrong launch fails at once on every rank instead of at rendezvous.
  const int world_size = std::atoi(world_env);
  KILN_CHECK(c.ddp ? world_size % P == 0 : world_size == P, "--pipeline-stages {}: {} ranks started; {}", P, world_size,
             c.ddp ? fmt::format("with --ddp the world must be a multiple of {} (stages x replicas)", P)
                   : fmt::format("start exactly {} (one per stage), or add --ddp for stages x replicas", P));
  c.device = rank_device(c, "--pipeline-stages");
  if (c.threads > 0) set_num_threads(c.threads);
  Datasets sets = load_datasets(c);
  auto world = dist::init_process_group({.backend = c.device.is_cuda() ? "nccl" : "gloo",
                                         .timeout = std::chrono::milliseconds(static_cast<int64_t>(c.dist_timeout_s * 1000))});
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
  auto model = make_model(c.model);
  MixedPrecision mp(c.amp, c.amp_mode);
  mp.prepare_model(*model);
  dist::PipelineOptions po;
  po.micro_batches = M;
  po.schedule = dist::parse_schedule(c.pipeline_schedule);
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
    po.boundaries = dist::time_balanced_boundaries(*model, sample, P, *world);
  }
  dist::Pipeline pipe(model, groups.pipeline, po);
  auto opt = make_optimizer(c, pipe.parameters());
  mp.prepare_optimizer(*opt);
  dist::share_found_inf(mp.scaler(), world);  // a skip on any stage or replica is a skip on all
  auto ce = [&](const Tensor& out, const Tensor& y) {
    return mp.scaler().scale(nn::functional::cross_entropy(out, y));
  };

  std::ostream quiet(nullptr);
  std::ostream& out = world->rank() == 0 ? log : quiet;
  nn::TrainingState state;
  if (!c.resume.empty()) {  // every replica reads the first replica's stage files
    state = dist::load_stage_checkpoint(pipe, c.resume, opt.get());
    mp.load(state);
    out << fmt::format("resumed from {} at epoch {} (step {})\n", c.resume, state.epoch, state.step);
  }
  const auto& b = pipe.boundaries();
  out << fmt::format("pipeline: {} stages ({}), {} micro-batches, {}, layers split at [{}] (by {}){}\n", P,
                     world->backend(), M, c.pipeline_schedule, fmt::join(b, ", "), c.pipeline_balance,
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
  const auto start = Clock::now();
  double train_seconds = 0;
  int64_t samples = 0;
  const int64_t last_epoch = c.stop_after_epochs > 0 ? std::min(c.epochs, state.epoch + c.stop_after_epochs) : c.epochs;
  for (int64_t epoch = state.epoch; epoch < last_epoch; ++epoch) {
    loader.set_epoch(epoch);
    EpochProgress progress(epoch, loader.size(), c.log_every, out);
    for (data::Example& batch : loader) {
      opt->zero_grad();
      double l;
      {
        amp::AutocastGuard autocast = mp.autocast();
        l = pipe.train_step(pipe.is_first() ? batch.data : Tensor(), pipe.is_last() ? batch.target : Tensor(), ce);
      }
      l /= mp.scaler().scale();  // NaN except on the last stage
      opt->set_lr(c.schedule == "cosine" ? cosine.lr_at(state.step, c.lr) : c.lr);
      mp.step(*opt);
      if (pipe.is_last()) r.step_losses.push_back(l);
      ++state.step;
      // The loss lives on the last stage: it comes up the pipeline only for the lines rank 0 prints.
      progress.step(batch.target.size(0) * replicas, pipe.is_last() ? l : 0,
                    [&](double v) { return from_last_stage(*groups.pipeline, comm, {v})[0]; });
    }
    train_seconds += progress.finish();
    samples += progress.samples();
    double epoch_loss = progress.mean_loss();
    if (pipe.is_last() && replicas > 1) {
      Tensor t = tensor({epoch_loss}, dtype(kFloat64)).to(comm);
      groups.data->allreduce(t, dist::ReduceOp::kAvg)->wait();
      epoch_loss = t.to(kCPU).item<double>();
    }
    r.epoch_train_loss.push_back(from_last_stage(*groups.pipeline, comm, {epoch_loss})[0]);
    std::tie(r.test_loss, r.test_accuracy) =
        evaluate(pipe, *sets.test, replicas > 1 ? groups.data.get() : nullptr, comm);
    ++r.epochs_done;
    progress.done(r.epoch_train_loss.back(), r.test_loss, r.test_accuracy);
    if (!c.save.empty()) {
      state.epoch = epoch + 1;
      state.rng = default_generator().state();
      mp.save(state);
      // One file per stage ("run.stage1-of-2.safetensors"), written by the first replica only.
      if (groups.replica == 0) dist::save_stage_checkpoint(pipe, c.save, opt.get(), state);
    }
  }
  r.wall_seconds = seconds_since(start);
  r.samples_per_sec = train_seconds > 0 ? static_cast<double>(samples) / train_seconds : 0;
  r.skipped_steps = mp.skipped_steps();
  r.rank = world->rank();
  r.world_size = world->size();
  return r;
}

}  // namespace kiln::examples
