#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/parallel.h"
#include "data/dataloader.h"
#include "data/mnist.h"
#include "distributed/backend/gloo_backend.h"
#include "distributed/backend/init.h"
#include "distributed/backend/job_env.h"
#include "distributed/data_parallel/ddp.h"
#include "distributed/data_parallel/scaler_sync.h"
#include "distributed/data_parallel/zero.h"
#include "distributed/debug/traced_process_group.h"
#include "models/build_model.h"
#include "nn/nn.h"
#include "train/checkpoint.h"
#include "train/distributed_checkpoint.h"
#include "train/graph_step.h"
#include "train/mixed_precision.h"
#include "train/pipeline_trainer.h"
#include "train/run_monitor.h"
#include "train/train_parts.h"
#include "train/zero_checkpoint.h"
#include "optim/lr_scheduler.h"
#include "profiler/memory.h"

namespace kiln::train {
namespace {

using Clock = std::chrono::steady_clock;


/// Mean loss and accuracy over a dataset, in eval mode without recording. With a process
/// group, each rank evaluates its contiguous slice and the sums are all-reduced.
std::pair<double, double> evaluate(nn::Module& model, const std::shared_ptr<data::TensorDataset>& ds,
                                   Device device, dist::ProcessGroup* pg) {
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

namespace {

/// The main job in one process or data parallel, in the parts PyTorch's C++ MNIST example has:
/// set-up (the constructor, in the order below), one epoch of training, the end of an epoch
/// (reduced loss, evaluation, checkpoint), and the checkpoint itself.
class Run {
 public:
  Run(const TrainConfig& config, std::ostream& log);
  TrainResult train();

 private:
  void build_model();         // model, mixed precision and (without ZeRO) the optimizer
  void join_process_group();  // --ddp: ranks of the launcher, srun or mpirun; traced, clock aligned
  void resume();              // --resume / --auto-resume (under ZeRO: in wrap_data_parallel)
  void wrap_data_parallel();  // DDP, and ZeRO-1's sharded optimizer over it
  void make_loader();         // sampler, loader, schedule, monitor, step checkpoints
  /// --cuda-graph: the step that warms up eagerly, then is captured and replayed.
  void make_graphed_step();
  /// One eager step on a batch already on the device; returns the loss (not read).
  Tensor eager_step(nn::Module& net, const Tensor& x, const Tensor& y, RunMonitor& monitor);
  /// Trains epoch `epoch` from batch `first_batch`; false when the run stops inside it.
  bool train_epoch(int64_t epoch, int64_t first_batch);
  void finish_epoch(int64_t epoch, const EpochProgress& progress);
  /// Everything a resumed step needs is in `state_` (position, generator, scaler) or a closed
  /// form of the step (the schedule), so a checkpoint may be taken after any step.
  void save(int64_t epoch, int64_t batch);
  std::ostream& out() { return rank_ == 0 ? log_ : quiet_; }  // only rank 0 speaks

  TrainConfig c_;
  std::ostream& log_;
  std::ostream quiet_{nullptr};
  Datasets sets_;
  nn::ModulePtr<> model_;  // models::build_model(c_.model)
  MixedPrecision mp_;
  std::unique_ptr<optim::Optimizer> opt_;
  std::shared_ptr<dist::ProcessGroup> pg_;
  int rank_ = 0, world_ = 1;
  train::TrainingState state_;
  std::unique_ptr<dist::DistributedDataParallel> ddp_;
  dist::ZeroRedundancyOptimizer* zero_ = nullptr;  // opt_, when --zero 1
  std::unique_ptr<data::DataLoader> loader_;
  std::unique_ptr<optim::CosineAnnealingLR> cosine_;
  std::unique_ptr<RunMonitor> monitor_;
  std::unique_ptr<StepCheckpoints> checkpoints_;
  std::unique_ptr<GraphedStep> graphed_;  // --cuda-graph
  TrainResult r_;
  double train_seconds_ = 0;
  int64_t samples_ = 0, run_steps_ = 0;
};

Run::Run(const TrainConfig& config, std::ostream& log)
    : c_(config), log_(log), mp_(config.amp, config.amp_mode) {
  profiler::track_memory();  // first: the peak counts every tensor of the run
  if (c_.ddp) c_.device = rank_device(c_, "--ddp");
  if (c_.threads > 0) set_num_threads(c_.threads);
  sets_ = load_datasets(c_);
  build_model();
  join_process_group();
  resume();
  wrap_data_parallel();
  make_loader();
  make_graphed_step();
}

void Run::build_model() {
  manual_seed(static_cast<uint64_t>(c_.seed));
  model_ = models::build_model(c_.model, {.dropout = c_.dropout, .width = c_.width});
  model_->to(c_.device);
  mp_.prepare_model(*model_);
  KILN_CHECK(c_.zero == 0 || c_.zero == 1, "--zero {}: only stage 1 (optimizer state sharding) exists", c_.zero);
  KILN_CHECK(c_.zero == 0 || c_.ddp, "--zero 1 shards the optimizer state over data-parallel ranks: add --ddp");
  // Under ZeRO the optimizer wraps the shards DDP's reducer makes: it is built after DDP.
  if (c_.zero == 0) {
    opt_ = make_optimizer(c_, model_->parameters());
    mp_.prepare_optimizer(*opt_);
  }
}

void Run::join_process_group() {
  if (!c_.ddp) return;
  dist::apply_scheduler_env();  // srun / mpirun: their variables give RANK, WORLD_SIZE, ...
  KILN_CHECK(std::getenv("WORLD_SIZE") != nullptr,
             "--ddp: WORLD_SIZE is not set; start the ranks with `tools/bazel run //distributed/launch -- "
             "--nproc-per-node N -- <mnist binary> --ddp ...` (or srun, or mpirun)");
  // Traced: the flight recorder keeps the last collectives (dumped on failure or SIGUSR1) and a
  // profiled run draws them on each rank's communication track, on a clock aligned here.
  pg_ = dist::trace_process_group(dist::init_process_group(
      {.backend = c_.device.is_cuda() ? "nccl" : "gloo",
       .timeout = std::chrono::milliseconds(static_cast<int64_t>(c_.timeout_s * 1000))}));
  dist::align_profiler_clock(*pg_);
  rank_ = pg_->rank();
  world_ = pg_->size();
}

void Run::resume() {
  if (c_.auto_resume && c_.resume.empty() && std::filesystem::exists(c_.save)) c_.resume = c_.save;
  if (c_.resume.empty() || c_.zero != 0) return;
  state_ = pg_ ? dist::load_checkpoint(*pg_, c_.resume, *model_, opt_.get())
               : train::load_checkpoint(c_.resume, *model_, opt_.get());
  mp_.load(state_);
  out() << fmt::format("resumed from {} at epoch {} batch {} (step {})\n", c_.resume, state_.epoch, state_.batch,
                       state_.step);
}

void Run::wrap_data_parallel() {
  if (!pg_) return;
  // After loading, so every rank starts from rank 0's (identical) checkpoint. Every rank must
  // make the same skip-or-step decision: under plain DDP it does without an all-reduce of the
  // scaler's flag (identical averaged gradients make an inf anywhere an inf everywhere; ddp_test
  // checks it); ZeRO, whose ranks check different shards, shares it.
  ddp_ = std::make_unique<dist::DistributedDataParallel>(model_, pg_);
  out() << fmt::format("data parallel: {} ranks ({}), {} gradient buckets, batch {} per rank\n", world_,
                       pg_->backend(), ddp_->bucket_names().size(), c_.batch_size);
  dist::ProcessGroup* backend = pg_.get();  // the group under the flight recorder's wrapper
  if (auto* traced = dynamic_cast<dist::TracedProcessGroup*>(backend)) backend = &traced->inner();
  if (auto* gloo = dynamic_cast<dist::ProcessGroupGloo*>(backend)) out() << "all-reduce: " << gloo->allreduce_path() << "\n";
  if (c_.zero != 1) return;
  auto z = std::make_unique<dist::ZeroRedundancyOptimizer>(
      *ddp_, [&](std::vector<optim::ParamGroup> groups) { return make_optimizer(c_, std::move(groups)); });
  mp_.prepare_optimizer(z->inner());         // o2 master weights: f32 copies of this rank's shards only
  dist::share_found_inf(mp_.scaler(), pg_);  // each rank checks only its shard's gradients
  if (!c_.resume.empty()) {
    state_ = dist::load_zero_checkpoint(c_.resume, *model_, *z);
    mp_.load(state_);
    out() << fmt::format("resumed from {} at epoch {} batch {} (step {})\n", c_.resume, state_.epoch, state_.batch,
                         state_.step);
  }
  out() << fmt::format("ZeRO-1: {} ({} buckets), optimizer state sharded over {} ranks\n", z->name(),
                       z->reducer().buckets().size(), world_);
  zero_ = z.get();
  opt_ = std::move(z);
}

void Run::make_loader() {
  data::DataLoaderOptions lo{.batch_size = c_.batch_size, .shuffle = !pg_, .drop_last = false,
                             .num_workers = c_.workers, .seed = static_cast<uint64_t>(c_.seed)};
  if (pg_)
    lo.sampler = std::make_shared<data::DistributedSampler>(sets_.train->size(), rank_, world_, /*shuffle=*/true,
                                                            static_cast<uint64_t>(c_.seed));
  loader_ = std::make_unique<data::DataLoader>(sets_.train, lo);
  // The schedule is a closed form of the global step, so a resumed run continues it exactly.
  cosine_ = std::make_unique<optim::CosineAnnealingLR>(*opt_, std::max<int64_t>(c_.epochs * loader_->size(), 1));
  // FLOPs of one sample's forward, counted by the profiler's kernel hooks; in eval mode, so that
  // BatchNorm's running statistics (a resumed run's included) are not moved by this sample.
  model_->eval();
  const double flops = forward_flops([&] {
    amp::AutocastGuard autocast = mp_.autocast();
    model_->forward(sets_.train->get_batch({0}).data.to(c_.device));
  });
  model_->train();
  monitor_ = std::make_unique<RunMonitor>(monitor_config(c_), rank_, flops, c_.device.is_cuda(), out());
  profiler::reset_peak(c_.device.type);
  checkpoints_ = std::make_unique<StepCheckpoints>(c_, pg_.get());
}

void Run::make_graphed_step() {
  if (!c_.cuda_graph) return;  // train() has checked that the run can be replayed
  opt_->set_lr(c_.lr);  // constant: the captured step keeps it
  graphed_ = std::make_unique<GraphedStep>(c_.device, c_.batch_size, [this](const Tensor& x, const Tensor& y) {
    Tensor loss;
    {
      amp::AutocastGuard autocast = mp_.autocast();
      loss = nn::functional::cross_entropy((*model_)(x), y);
    }
    opt_->zero_grad(/*set_to_none=*/false);  // in place: replays write the gradients the capture saw
    mp_.backward(loss);
    mp_.step(*opt_);
    return loss;
  });
  out() << fmt::format("cuda graph: {} eager warm-up steps, then one captured step replayed per full batch of {}\n",
                       GraphedStep::kWarmupSteps, c_.batch_size);
}

Tensor Run::eager_step(nn::Module& net, const Tensor& x, const Tensor& y, RunMonitor& monitor) {
  Tensor loss;
  {
    profiler::RecordFunction range("forward");
    amp::AutocastGuard autocast = mp_.autocast();
    loss = nn::functional::cross_entropy(net(x), y);
  }
  monitor.mark(Phase::kForward);
  {
    profiler::RecordFunction range("backward");
    opt_->zero_grad();
    mp_.backward(loss);
  }
  monitor.mark(Phase::kBackward);
  if (ddp_) monitor.comm(ddp_->stats().comm_seconds, ddp_->stats().exposed_seconds);
  return loss;
}

bool Run::train_epoch(int64_t epoch, int64_t first_batch) {
  // What the loop runs: the model, or the same model under data parallel (same names, same state).
  nn::Module& net = ddp_ ? static_cast<nn::Module&>(*ddp_) : *model_;
  RunMonitor& monitor = *monitor_;
  loader_->set_epoch(epoch);
  loader_->set_start_batch(first_batch);
  int64_t batch_no = first_batch;
  EpochProgress progress(epoch, loader_->size(), c_.log_every, out());
  bool stop = false;
  monitor.step_begin();
  for (data::Example& batch : *loader_) {
    monitor.data_ready();
    const int64_t samples = batch.target.size(0) * world_;
    const double lr = c_.schedule == "cosine" ? cosine_->lr_at(state_.step, c_.lr) : c_.lr;
    double l = std::nan("");  // the step's loss, when read back
    double gnorm = -1;
    if (graphed_) {
      // The whole step at once (its host time shows as "rest"); the loss stays on the device.
      graphed_->run(batch.data, batch.target);
      if (monitor.logs_this_step()) {
        gnorm = grad_norm(model_->parameters());
        l = graphed_->last_loss();
      }
    } else {
      Tensor x = batch.data.to(c_.device), y = batch.target.to(c_.device);
      Tensor loss = eager_step(net, x, y, monitor);
      if (monitor.logs_this_step()) gnorm = grad_norm(model_->parameters());
      {
        profiler::RecordFunction range("optimizer");
        opt_->set_lr(lr);
        mp_.step(*opt_);
      }
      monitor.mark(Phase::kOptimizer);
      l = loss.item<double>();
      r_.step_losses.push_back(l);
    }
    ++state_.step;
    ++run_steps_;
    ++batch_no;
    if (graphed_) progress.step_unread(samples, [&] { return std::isnan(l) ? graphed_->last_loss() : l; });
    else progress.step(samples, l);
    monitor.step_end(samples, l, lr, gnorm, mp_.scaler().scale());
    const StepCheckpoints::Action act = checkpoints_->after_step(state_.step, run_steps_);
    if (act.save) save(epoch, batch_no);
    if (act.save && act.stop)
      out() << fmt::format("saved {} at epoch {} batch {} (step {})\n", c_.save, epoch, batch_no, state_.step);
    if ((stop = act.stop)) break;
  }
  if (graphed_) progress.add_loss_sum(graphed_->take_loss_sum());
  train_seconds_ += progress.finish();
  samples_ += progress.samples();
  if (stop) {
    r_.preempted = checkpoints_->preempted();
    out() << (r_.preempted ? "preempted: stopped after step " : "stopped after step ") << state_.step << "\n";
    return false;
  }
  finish_epoch(epoch, progress);
  return true;
}

void Run::finish_epoch(int64_t epoch, const EpochProgress& progress) {
  double epoch_loss = progress.mean_loss();
  if (pg_) {
    Tensor l = tensor({epoch_loss}, dtype(kFloat64));
    pg_->allreduce(l, dist::ReduceOp::kAvg)->wait();
    epoch_loss = l.item<double>();
  }
  r_.epoch_train_loss.push_back(epoch_loss);
  // Evaluated as it trains: under autocast (an o2 model also needs its f32 inputs cast down).
  auto [test_loss, test_acc] = [&] {
    amp::AutocastGuard autocast = mp_.autocast();
    return evaluate(*model_, sets_.test, c_.device, pg_.get());
  }();
  r_.test_loss = test_loss;
  r_.test_accuracy = test_acc;
  monitor_->test_metrics(test_loss, test_acc, state_.step);
  ++r_.epochs_done;
  progress.done(r_.epoch_train_loss.back(), test_loss, test_acc);
  if (!c_.save.empty()) save(epoch + 1, 0);
}

void Run::save(int64_t epoch, int64_t batch) {
  const auto t0 = Clock::now();
  state_.epoch = epoch;
  state_.batch = batch;
  state_.rng = default_generator().state();
  mp_.save(state_);
  if (zero_)
    dist::save_zero_checkpoint(c_.save, *model_, *zero_, state_,
                               c_.zero_checkpoint == "sharded" ? dist::ZeroCheckpointKind::kSharded
                                                               : dist::ZeroCheckpointKind::kConsolidated);
  else if (pg_)
    dist::save_checkpoint(*pg_, c_.save, *model_, opt_.get(), state_);  // rank 0 writes, the others wait
  else
    train::save_checkpoint(c_.save, *model_, opt_.get(), state_);
  ++r_.checkpoints;
  r_.checkpoint_seconds += seconds_since(t0);
}

TrainResult Run::train() {
  const auto start = Clock::now();
  const int64_t first_epoch = state_.epoch;
  const int64_t last_epoch =
      c_.stop_after_epochs > 0 ? std::min(c_.epochs, first_epoch + c_.stop_after_epochs) : c_.epochs;
  for (int64_t epoch = first_epoch; epoch < last_epoch; ++epoch)
    if (!train_epoch(epoch, epoch == first_epoch ? state_.batch : 0)) break;
  r_.steps = state_.step;
  r_.wall_seconds = seconds_since(start);
  r_.samples_per_sec = train_seconds_ > 0 ? static_cast<double>(samples_) / train_seconds_ : 0;
  r_.skipped_steps = mp_.skipped_steps();
  r_.peak_memory_bytes = profiler::memory_counters(c_.device.type).peak;
  r_.mfu = monitor_->mfu();
  r_.rank = rank_;
  r_.world_size = world_;
  r_.graph_replays = graphed_ ? graphed_->replays() : 0;
  return r_;
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
  if (config.pipeline_stages > 1) return train_pipeline(config, log);
  return Run(config, log).train();
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
