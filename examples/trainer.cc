#include "examples/trainer.h"

#include <chrono>
#include <cstdlib>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/parallel.h"
#include "data/dataloader.h"
#include "data/mnist.h"
#include "distributed/checkpoint.h"
#include "distributed/ddp.h"
#include "distributed/gloo_backend.h"
#include "distributed/init.h"
#include "distributed/job_env.h"
#include "distributed/scaler_sync.h"
#include "distributed/zero.h"
#include "distributed/zero_checkpoint.h"
#include "distributed/traced_process_group.h"
#include "examples/mixed_precision.h"
#include "examples/models.h"
#include "examples/pipeline_trainer.h"
#include "examples/run_monitor.h"
#include "examples/train_parts.h"
#include "nn/checkpoint.h"
#include "optim/lr_scheduler.h"
#include "profiler/memory.h"

namespace kiln::examples {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

/// Mean loss and accuracy over a dataset, in eval mode without recording. With a process
/// group, each rank evaluates its contiguous slice and the sums are all-reduced.
std::pair<double, double> evaluate(nn::Module& model, const std::shared_ptr<data::MnistDataset>& ds, Device device,
                                   dist::ProcessGroup* pg) {
  NoGradGuard g;
  model.eval();
  std::shared_ptr<data::Dataset> part = ds;
  if (pg != nullptr) {
    int64_t n = ds->size(), lo = n * pg->rank() / pg->size(), hi = n * (pg->rank() + 1) / pg->size();
    part = std::make_shared<data::TensorDataset>(ds->data().narrow(0, lo, hi - lo), ds->targets().narrow(0, lo, hi - lo));
  }
  data::DataLoader loader(part, {.batch_size = 1000, .shuffle = false});
  double loss_sum = 0;
  int64_t correct = 0, n = 0;
  for (data::Example& b : loader) {
    Tensor x = b.data.to(device), y = b.target.to(device);
    Tensor logits = model.forward(x);
    loss_sum += nn::functional::cross_entropy(logits, y, nn::functional::Reduction::sum).item<double>();
    correct += (logits.argmax(1) == y).sum().item<int64_t>();
    n += y.size(0);
  }
  model.train();
  if (pg != nullptr) {
    Tensor sums = tensor({loss_sum, static_cast<double>(correct), static_cast<double>(n)}, dtype(kFloat64));
    pg->allreduce(sums)->wait();
    auto v = sums.to_vector<double>();
    return {v[0] / v[2], v[1] / v[2]};
  }
  return {loss_sum / static_cast<double>(n), static_cast<double>(correct) / static_cast<double>(n)};
}

}  // namespace

TrainResult train(const TrainConfig& config, std::ostream& log) {
  TrainConfig c = config;
  KILN_CHECK(c.zero == 0 || c.pipeline_stages == 1, "--zero 1 is for data parallel alone, not with --pipeline-stages {}",
             c.pipeline_stages);
  if (c.pipeline_stages > 1) return train_pipeline(config, log);
  profiler::track_memory();  // first: the peak counts every tensor of the run
  if (c.ddp) c.device = rank_device(c, "--ddp");
  if (c.threads > 0) set_num_threads(c.threads);
  Datasets sets = load_datasets(c);
  std::shared_ptr<data::Dataset> train_set = sets.train;
  auto test_set = sets.test;

  manual_seed(static_cast<uint64_t>(c.seed));
  auto model = make_model(c.model, c.dropout);
  model->to(c.device);
  MixedPrecision mp(c.amp, c.amp_mode);
  mp.prepare_model(*model);
  KILN_CHECK(c.zero == 0 || c.zero == 1, "--zero {}: only stage 1 (optimizer state sharding) exists", c.zero);
  KILN_CHECK(c.zero == 0 || c.ddp, "--zero 1 shards the optimizer state over data-parallel ranks: add --ddp");
  // Under ZeRO the optimizer wraps the shards DDP's reducer makes: it is built after DDP below.
  std::unique_ptr<optim::Optimizer> opt;
  if (c.zero == 0) {
    opt = make_optimizer(c, model->parameters());
    mp.prepare_optimizer(*opt);
  }

  // Data parallel: join the job; only rank 0 speaks.
  std::shared_ptr<dist::ProcessGroup> pg;
  if (c.ddp) dist::apply_scheduler_env();  // srun / mpirun: their variables give RANK, WORLD_SIZE, ...
  KILN_CHECK(!c.ddp || std::getenv("WORLD_SIZE") != nullptr,
             "--ddp: WORLD_SIZE is not set; start the ranks with `tools/bazel run //distributed:launch -- "
             "--nproc-per-node N -- <mnist binary> --ddp ...` (or srun, or mpirun)");
  if (c.ddp) {
    // Traced: the flight recorder keeps the last collectives (dumped on failure or SIGUSR1) and a
    // profiled run draws them on each rank's communication track, on a clock aligned here.
    pg = dist::trace_process_group(dist::init_process_group(
        {.backend = c.device.is_cuda() ? "nccl" : "gloo",
         .timeout = std::chrono::milliseconds(static_cast<int64_t>(c.timeout_s * 1000))}));
    dist::align_profiler_clock(*pg);
  }
  const int rank = pg ? pg->rank() : 0, world = pg ? pg->size() : 1;
  std::ostream quiet(nullptr);
  std::ostream& out = rank == 0 ? log : quiet;

  nn::TrainingState state;
  if (c.auto_resume && c.resume.empty() && std::filesystem::exists(c.save)) c.resume = c.save;
  if (!c.resume.empty() && c.zero == 0) {
    state = pg ? dist::load_checkpoint(*pg, c.resume, *model, opt.get())
               : nn::load_checkpoint(c.resume, *model, opt.get());
    mp.load(state);
    out << fmt::format("resumed from {} at epoch {} batch {} (step {})\n", c.resume, state.epoch, state.batch,
                       state.step);
  }
  // After loading, so every rank starts from rank 0's (identical) checkpoint.
  std::unique_ptr<dist::DistributedDataParallel> ddp;
  if (pg) {
    ddp = std::make_unique<dist::DistributedDataParallel>(model, pg);
    // Every rank must make the same skip-or-step decision. Under plain DDP it does without an
    // extra all-reduce of the scaler's flag: backward leaves identical averaged gradients on every
    // rank, so an inf anywhere is an inf everywhere (ddp_test checks it). Pipeline and hybrid runs,
    // whose stages hold different gradients, share the flag (pipeline_trainer.cc).
    out << fmt::format("data parallel: {} ranks ({}), {} gradient buckets, batch {} per rank\n", world,
                       pg->backend(), ddp->bucket_names().size(), c.batch_size);
    dist::ProcessGroup* backend = pg.get();  // the group under the flight recorder's wrapper
    if (auto* traced = dynamic_cast<dist::TracedProcessGroup*>(backend)) backend = &traced->inner();
    if (auto* gloo = dynamic_cast<dist::ProcessGroupGloo*>(backend)) out << "all-reduce: " << gloo->allreduce_path() << "\n";
  }
  dist::ZeroRedundancyOptimizer* zero = nullptr;
  if (c.zero == 1) {
    auto z = std::make_unique<dist::ZeroRedundancyOptimizer>(
        *ddp, [&](std::vector<optim::ParamGroup> groups) { return make_optimizer(c, std::move(groups)); });
    mp.prepare_optimizer(z->inner());        // o2 master weights: f32 copies of this rank's shards only
    dist::share_found_inf(mp.scaler(), pg);  // each rank checks only its shard's gradients
    if (!c.resume.empty()) {
      state = dist::load_zero_checkpoint(c.resume, *model, *z);
      mp.load(state);
      out << fmt::format("resumed from {} at epoch {} batch {} (step {})\n", c.resume, state.epoch, state.batch,
                         state.step);
    }
    out << fmt::format("ZeRO-1: {} ({} buckets), optimizer state sharded over {} ranks\n", z->name(),
                       z->reducer().buckets().size(), world);
    zero = z.get();
    opt = std::move(z);
  }
  // What the loop runs: the model, or the same model under data parallel (same names, same state).
  nn::Module& net = ddp ? static_cast<nn::Module&>(*ddp) : *model;

  data::DataLoaderOptions lo{.batch_size = c.batch_size, .shuffle = !pg, .drop_last = false,
                             .num_workers = c.workers, .seed = static_cast<uint64_t>(c.seed)};
  if (pg)
    lo.sampler = std::make_shared<data::DistributedSampler>(train_set->size(), rank, world, /*shuffle=*/true,
                                                            static_cast<uint64_t>(c.seed));
  data::DataLoader loader(train_set, lo);
  // The schedule is a closed form of the global step, so a resumed run continues it exactly.
  const int64_t total_steps = c.epochs * loader.size();
  optim::CosineAnnealingLR cosine(*opt, std::max<int64_t>(total_steps, 1));
  // FLOPs of one sample's forward, counted by the profiler's kernel hooks.
  const double flops = forward_flops([&] {
    amp::AutocastGuard autocast = mp.autocast();
    model->forward(train_set->get_batch({0}).data.to(c.device));
  });
  RunMonitor monitor(monitor_config(c), rank, flops, c.device.is_cuda(), out);
  profiler::reset_peak(c.device.type);
  TrainResult r;
  const auto start = Clock::now();
  double train_seconds = 0;
  int64_t samples = 0, run_steps = 0;
  StepCheckpoints checkpoints(c, pg.get());
  // Everything a resumed step needs is in `state` (position, generator, scaler) or a closed form
  // of the step (the schedule), so a checkpoint may be taken after any step.
  auto save = [&](int64_t epoch, int64_t batch) {
    const auto t0 = Clock::now();
    state.epoch = epoch;
    state.batch = batch;
    state.rng = default_generator().state();
    mp.save(state);
    if (zero)
      dist::save_zero_checkpoint(c.save, *model, *zero, state,
                                 c.zero_checkpoint == "sharded" ? dist::ZeroCheckpointKind::kSharded
                                                                : dist::ZeroCheckpointKind::kConsolidated);
    else if (pg)
      dist::save_checkpoint(*pg, c.save, *model, opt.get(), state);  // rank 0 writes, the others wait
    else
      nn::save_checkpoint(c.save, *model, opt.get(), state);
    ++r.checkpoints;
    r.checkpoint_seconds += seconds_since(t0);
  };
  const int64_t first_epoch = state.epoch, first_batch = state.batch;
  const int64_t last_epoch =
      c.stop_after_epochs > 0 ? std::min(c.epochs, first_epoch + c.stop_after_epochs) : c.epochs;
  for (int64_t epoch = first_epoch; epoch < last_epoch && !r.preempted; ++epoch) {
    loader.set_epoch(epoch);
    int64_t batch_no = epoch == first_epoch ? first_batch : 0;
    loader.set_start_batch(batch_no);
    EpochProgress progress(epoch, loader.size(), c.log_every, out);
    bool stop = false;
    monitor.step_begin();
    for (data::Example& batch : loader) {
      monitor.data_ready();
      Tensor x = batch.data.to(c.device), y = batch.target.to(c.device);
      Tensor loss;
      {
        profiler::RecordFunction range("forward");
        amp::AutocastGuard autocast = mp.autocast();
        loss = nn::functional::cross_entropy(net(x), y);
      }
      monitor.mark(Phase::kForward);
      {
        profiler::RecordFunction range("backward");
        opt->zero_grad();
        mp.backward(loss);
      }
      monitor.mark(Phase::kBackward);
      if (ddp) monitor.comm(ddp->stats().comm_seconds, ddp->stats().exposed_seconds);
      const double gnorm = monitor.logs_this_step() ? grad_norm(model->parameters()) : -1;
      const double lr = c.schedule == "cosine" ? cosine.lr_at(state.step, c.lr) : c.lr;
      {
        profiler::RecordFunction range("optimizer");
        opt->set_lr(lr);
        mp.step(*opt);
      }
      monitor.mark(Phase::kOptimizer);
      double l = loss.item<double>();
      r.step_losses.push_back(l);
      ++state.step;
      ++run_steps;
      ++batch_no;
      progress.step(y.size(0) * world, l);
      monitor.step_end(y.size(0) * world, l, lr, gnorm, mp.scaler().scale());
      const StepCheckpoints::Action act = checkpoints.after_step(state.step, run_steps);
      if (act.save) save(epoch, batch_no);
      if (act.save && act.stop)
        out << fmt::format("saved {} at epoch {} batch {} (step {})\n", c.save, epoch, batch_no, state.step);
      if ((stop = act.stop)) break;
    }
    train_seconds += progress.finish();
    samples += progress.samples();
    if (stop) {
      r.preempted = checkpoints.preempted();
      out << (r.preempted ? "preempted: stopped after step " : "stopped after step ") << state.step << "\n";
      break;
    }
    double epoch_loss = progress.mean_loss();
    if (pg) {
      Tensor l = tensor({epoch_loss}, dtype(kFloat64));
      pg->allreduce(l, dist::ReduceOp::kAvg)->wait();
      epoch_loss = l.item<double>();
    }
    r.epoch_train_loss.push_back(epoch_loss);
    // Evaluated as it trains: under autocast (an o2 model also needs its f32 inputs cast down).
    auto [test_loss, test_acc] = [&] {
      amp::AutocastGuard autocast = mp.autocast();
      return evaluate(*model, test_set, c.device, pg.get());
    }();
    r.test_loss = test_loss;
    r.test_accuracy = test_acc;
    monitor.test_metrics(test_loss, test_acc, state.step);
    ++r.epochs_done;
    progress.done(r.epoch_train_loss.back(), test_loss, test_acc);
    if (!c.save.empty()) save(epoch + 1, 0);
  }
  r.steps = state.step;
  r.wall_seconds = seconds_since(start);
  r.samples_per_sec = train_seconds > 0 ? static_cast<double>(samples) / train_seconds : 0;
  r.skipped_steps = mp.skipped_steps();
  r.peak_memory_bytes = profiler::memory_counters(c.device.type).peak;
  r.mfu = monitor.mfu();
  r.rank = rank;
  r.world_size = world;
  return r;
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
      {"optimizer", c.optimizer},
      {"lr", c.lr},
      {"schedule", c.schedule},
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
  };
  if (r.mfu >= 0) line["mfu"] = r.mfu;
  if (c.pipeline_stages > 1) {
    line["pipeline_stages"] = c.pipeline_stages;
    line["micro_batches"] = c.micro_batches;
    line["pipeline_schedule"] = c.pipeline_schedule;
    line["dropped_batches"] = r.dropped_batches;
  }
  return line.dump();
}

}  // namespace kiln::examples
