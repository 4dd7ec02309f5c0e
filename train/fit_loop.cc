// train::Trainer::fit: epochs of micro-batches grouped into optimizer steps, with validation,
// callbacks (around the run, the epoch and inside each step), progress lines, checkpoints,
// preemption and the CUDA-graph step (set-up and the strategies are in fit.cc).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <optional>

#include "distributed/launch/preemption.h"
#include "optim/clip.h"
#include "optim/lr_scheduler.h"
#include "profiler/profiler.h"
#include "train/callback.h"
#include "train/fit_impl.h"
#include "train/fit_parts.h"
#include "train/fit_pipeline.h"
#include "train/progress.h"

namespace kiln::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

/// The interval between two progress lines.
struct Window {
  Clock::time_point start = Clock::now();
  double loss_sum = 0;
  int64_t steps = 0, samples = 0;
};

/// Loads the checkpoint this run continues: `resume_from`, or with `resume` an existing
/// `checkpoint` (under Pipeline a file per stage).
void resume_if_asked(Trainer& t, Trainer::Impl& m, const std::vector<std::shared_ptr<Callback>>& callbacks) {
  const FitOptions& o = t.options();
  auto exists = [&](const std::string& path) {
    return m.pipeline ? m.pipeline->stage_files_exist(path) : std::filesystem::exists(path);
  };
  if (!o.resume_from.empty()) {
    KILN_CHECK(exists(o.resume_from), "Trainer: resume_from '{}' does not exist", o.resume_from);
    load_fit_checkpoint(t, m, callbacks, o.resume_from);
  } else if (o.resume && !o.checkpoint.empty() && exists(o.checkpoint)) {
    load_fit_checkpoint(t, m, callbacks, o.checkpoint);
  }
}

/// cuda_graph: the whole step (forward, backward, optimizer) captured after a few eager steps.
void install_graphed_step(Trainer& t, Trainer::Impl& m, int64_t batch_size, std::ostream& out) {
  m.graphed = std::make_unique<GraphedStep>(t.options().device, batch_size, [&t, &m](const Tensor& x, const Tensor& y) {
    Tensor loss;
    {
      amp::AutocastGuard autocast = m.mp.autocast();
      loss = fit_loss(t.options(), t.model()(x), y);
    }
    t.optimizer().zero_grad(/*set_to_none=*/false);  // in place: replays write the gradients the capture saw
    m.mp.backward(loss);
    m.mp.step(t.optimizer());
    return loss;
  });
  out << fmt::format("cuda graph: {} eager warm-up steps, then one captured step replayed per full batch of {}\n",
                     GraphedStep::kWarmupSteps, batch_size);
}

/// One loader batch's forward and backward, eager (not under cuda_graph), with the callbacks
/// around them; `sync`: the step's last micro-batch (DDP all-reduces only then). Its loss: NaN on
/// a pipeline's stages but the last.
double train_micro_batch(Trainer& t, Trainer::Impl& m, nn::Module& net, const data::Example& batch, bool sync,
                         int64_t group_n, const std::vector<std::shared_ptr<Callback>>& callbacks) {
  const FitOptions& o = t.options();
  if (m.pipeline) {
    double loss;
    {
      profiler::RecordFunction range("pipeline step");  // forward and backward, interleaved
      loss = m.pipeline->train_step(o, batch, group_n);
    }
    const Tensor shown = std::isnan(loss) ? Tensor() : scalar_tensor(loss, dtype(kFloat64));
    for (auto& cb : callbacks) cb->on_after_forward(t, shown);
    for (auto& cb : callbacks) cb->on_after_backward(t);
    return loss;
  }
  Tensor x = batch.data.to(o.device), y = batch.target.to(o.device);
  std::optional<dist::DistributedDataParallel::NoSyncGuard> no_sync;
  if (m.ddp && !sync) no_sync.emplace(*m.ddp);  // all-reduce once, on the last
  Tensor loss;
  {
    profiler::RecordFunction range("forward");
    amp::AutocastGuard autocast = m.mp.autocast();
    loss = fit_loss(o, net(x), y);
  }
  for (auto& cb : callbacks) cb->on_after_forward(t, loss);
  {
    profiler::RecordFunction range("backward");
    m.mp.backward(group_n > 1 ? loss / static_cast<double>(group_n) : loss);
  }
  for (auto& cb : callbacks) cb->on_after_backward(t);
  return loss.item<double>();
}

/// The optimizer step after a group of micro-batches (not under cuda_graph): clipping (of the
/// unscaled gradients under f16; over the shards or the stages), the schedule's lr, the hook, the
/// step. Sets step.grad_norm when clipping.
void optimizer_step(Trainer& t, Trainer::Impl& m, StepMetrics& step, optim::CosineAnnealingLR* cosine,
                    int64_t total_steps, const std::vector<std::shared_ptr<Callback>>& callbacks) {
  const FitOptions& o = t.options();
  optim::Optimizer& opt = t.optimizer();
  if (o.clip_grad_norm > 0) {
    if (m.mp.scaler().is_enabled()) m.mp.scaler().unscale_(opt);  // clip the true gradients
    step.grad_norm = m.pipeline ? m.pipeline->clip_grad_norm(o.clip_grad_norm)
                     : m.zero   ? m.zero->clip_grad_norm_(o.clip_grad_norm)
                                : optim::clip_grad_norm_(t.model().parameters(), o.clip_grad_norm);
  }
  if (cosine) opt.set_lr(cosine->lr_at(m.state.step, o.lr));
  if (o.schedule == Schedule::warmup_cosine) opt.set_lr(scheduled_lr(o, m.state.step, total_steps));
  for (auto& cb : callbacks) cb->on_before_optimizer_step(t);
  profiler::RecordFunction range("optimizer");
  m.mp.step(opt);
}

/// An epoch's metrics once its steps are done: the train loss (averaged over DataParallel's
/// ranks), validation on `val` (with its callbacks) and the learning rate.
EpochMetrics epoch_metrics(Trainer& t, Trainer::Impl& m, int64_t epoch, double train_loss, double seconds,
                           data::DataLoader* val, const std::vector<std::shared_ptr<Callback>>& callbacks) {
  EpochMetrics em{.epoch = epoch, .train_loss = train_loss, .seconds = seconds};
  if (m.pg && !m.pipeline) {  // a pipeline's step losses are already every rank's
    Tensor l = tensor({em.train_loss}, dtype(kFloat64)).to(m.comm_device(t.options()));
    m.pg->allreduce(l, dist::ReduceOp::kAvg)->wait();
    em.train_loss = l.to(kCPU).item<double>();
  }
  if (val != nullptr) {
    for (auto& cb : callbacks) cb->on_validation_begin(t);
    const EvalMetrics ev = t.evaluate(*val);
    for (auto& cb : callbacks) cb->on_validation_end(t);
    em.val_loss = ev.loss;
    em.val_accuracy = ev.accuracy;
  }
  em.lr = t.optimizer().lr();
  return em;
}

/// "epoch E/N done: train_loss ... val_loss ... val_accuracy ... (S samples/s)".
std::string epoch_line(const EpochMetrics& em, int64_t epochs, double samples_per_sec) {
  std::string line = fmt::format("epoch {}/{} done: train_loss {:.4f}", em.epoch + 1, epochs, em.train_loss);
  if (em.val_loss) line += fmt::format(" val_loss {:.4f}", *em.val_loss);
  if (em.val_accuracy) line += fmt::format(" val_accuracy {:.4f}", *em.val_accuracy);
  return line + fmt::format(" ({:.0f} samples/s)\n", samples_per_sec);
}

}  // namespace

FitResult Trainer::fit(data::DataLoader& train_loader, data::DataLoader* val) {
  const auto start = Clock::now();
  Impl& m = *impl_;
  const FitOptions& o = options_;
  std::ostream& out = m.out(o);
  stop_requested_ = false;
  FitResult r;
  r.rank = m.rank;
  r.world_size = m.world;
  if (!m.resumed) resume_if_asked(*this, m, callbacks_);
  m.resumed = true;

  // DataParallel: each rank its share; Pipeline: each replica its share (every stage the same batches).
  std::unique_ptr<data::DataLoader> shard = m.pipeline ? m.pipeline->prepare_loader(o, train_loader)
                                            : m.pg     ? shard_loader(train_loader, m.rank, m.world)
                                                       : nullptr;
  data::DataLoader& loader = shard ? *shard : train_loader;
  const int64_t batches = loader.size();
  KILN_CHECK(batches > 0, "Trainer::fit: the training loader has no batches (data set of {} samples, batch size {})",
             loader.dataset()->size(), loader.options().batch_size);
  const int64_t steps_per_epoch = (batches + o.grad_accum - 1) / o.grad_accum;
  position_from_step(m.state, steps_per_epoch, o.grad_accum);  // a checkpoint of another trainer
  int64_t total_steps = o.epochs * steps_per_epoch;
  if (o.max_steps > 0) total_steps = o.epochs > 0 ? std::min(total_steps, o.max_steps) : o.max_steps;
  const int64_t last_epoch = (total_steps + steps_per_epoch - 1) / steps_per_epoch;
  // The schedule is a closed form of the global step, so a resumed run continues it exactly.
  std::unique_ptr<optim::CosineAnnealingLR> cosine;
  if (o.schedule == Schedule::cosine)
    cosine = std::make_unique<optim::CosineAnnealingLR>(*opt_, std::max<int64_t>(total_steps, 1));
  nn::Module& net = m.ddp ? static_cast<nn::Module&>(*m.ddp) : *model_;
  if (o.cuda_graph && !m.graphed) install_graphed_step(*this, m, loader.options().batch_size, out);
  // Installed for fit()'s lifetime; under DataParallel the ranks agree after every step.
  std::optional<dist::PreemptionGuard> preemption;
  if (o.handle_preemption) preemption.emplace();
  const Device comm = m.comm_device(o);
  const int64_t replicas = m.pipeline ? m.pipeline->replicas() : m.world;  // ranks that read different data

  for (auto& cb : callbacks_) cb->on_train_begin(*this);
  double train_seconds = 0;
  int64_t samples = 0, run_steps = 0;
  const auto train_start = Clock::now();
  const int64_t first_epoch = m.state.epoch;
  bool stop = stop_requested_ || m.state.step >= total_steps;
  auto tell_stop = [&] {
    out << (r.preempted ? "preempted: " : "") << "stopped after step " << m.state.step
        << (o.checkpoint.empty() ? "" : ", saved to " + o.checkpoint) << "\n";
  };
  for (int64_t epoch = first_epoch; epoch < last_epoch && !stop; ++epoch) {
    const int64_t first_batch = epoch == first_epoch ? m.state.batch : 0;
    m.state.epoch = epoch;
    loader.set_epoch(epoch);
    loader.set_start_batch(first_batch);
    model_->train();
    const auto epoch_start = Clock::now();
    for (auto& cb : callbacks_) cb->on_epoch_begin(*this, epoch);
    int64_t b = first_batch, in_group = 0, group_n = 0, group_samples = 0, epoch_steps = 0;
    double group_loss = 0, epoch_loss = 0;
    Window window;
    for (data::Example& batch : loader) {
      for (auto& cb : callbacks_) cb->on_batch_begin(*this, batch);
      if (in_group == 0) {
        group_n = std::min(o.grad_accum, batches - b);
        if (!m.graphed) opt_->zero_grad();
        group_loss = 0;
        group_samples = 0;
      }
      const int64_t n =
          batch.target.defined() && batch.target.dim() > 0 ? batch.target.size(0) : batch.data.size(0);
      if (m.graphed)
        m.graphed->run(batch.data, batch.target);  // the whole step; the loss stays on the device
      else
        group_loss += train_micro_batch(*this, m, net, batch, in_group + 1 == group_n, group_n, callbacks_);
      samples += n * replicas;
      window.samples += n * replicas;
      group_samples += n * replicas;
      ++b;
      if (++in_group < group_n) continue;
      in_group = 0;

      const double mean_loss = group_loss / static_cast<double>(group_n);
      StepMetrics step{.epoch = epoch,
                       .loss = m.graphed    ? std::numeric_limits<double>::quiet_NaN()
                               : m.pipeline ? m.pipeline->step_loss(mean_loss)
                                            : mean_loss,
                       .samples = group_samples};
      if (!m.graphed) {
        optimizer_step(*this, m, step, cosine.get(), total_steps, callbacks_);
        m.last_loss = step.loss;
        r.step_losses.push_back(step.loss);
        epoch_loss += step.loss;
        window.loss_sum += step.loss;
      }
      step.lr = opt_->lr();
      step.loss_scale = m.mp.scaler().scale();
      step.step = ++m.state.step;
      ++run_steps;
      ++epoch_steps;
      ++window.steps;
      m.heartbeat.beat(m.state.step);
      for (auto& cb : callbacks_) cb->on_step_end(*this, step);
      if (o.log_every > 0 && m.state.step % o.log_every == 0) {
        const auto now = Clock::now();
        const double shown = m.graphed ? m.graphed->last_loss() : window.loss_sum / static_cast<double>(window.steps);
        out << progress_line({.step = m.state.step, .total_steps = total_steps, .epoch = epoch + 1,
                              .epochs = last_epoch, .loss = shown,
                              .samples_per_sec = static_cast<double>(window.samples) / seconds_between(window.start, now),
                              .elapsed_s = seconds_between(train_start, now), .run_steps = run_steps})
            << "\n" << std::flush;  // read while it runs, and block-buffered when redirected
        window = Window{};
      }
      // A collective under DataParallel: every rank stops after the same step.
      if (preemption && preemption->should_stop(m.pg.get(), comm)) r.preempted = true;
      stop = stop_requested_ || r.preempted || m.state.step >= total_steps ||
             (o.stop_after_steps > 0 && run_steps >= o.stop_after_steps);
      const bool mid_epoch = b < batches;  // the epoch's end saves the epoch's last step
      if (!o.checkpoint.empty() && mid_epoch && (stop || (o.save_every > 0 && m.state.step % o.save_every == 0)))
        save_fit_checkpoint(*this, m, callbacks_, epoch, b);
      m.state.batch = b;
      if (stop) break;
    }
    if (m.graphed) epoch_loss = m.graphed->take_loss_sum();
    const double epoch_seconds = seconds_between(epoch_start, Clock::now());
    train_seconds += epoch_seconds;
    if (b < batches) {  // stopped inside the epoch
      if (m.pipeline) m.pg->barrier()->wait();  // every stage's file is written before any rank leaves
      tell_stop();
      break;
    }
    const EpochMetrics em =
        epoch_metrics(*this, m, epoch, epoch_loss / static_cast<double>(std::max<int64_t>(epoch_steps, 1)),
                      epoch_seconds, val, callbacks_);
    if (val != nullptr) {
      r.val_loss = em.val_loss;
      r.val_accuracy = em.val_accuracy;
    }
    if (o.epoch_lines)
      out << epoch_line(em, last_epoch, static_cast<double>(samples) / std::max(train_seconds, 1e-9)) << std::flush;
    for (auto& cb : callbacks_) cb->on_epoch_end(*this, em);
    r.epochs.push_back(em);
    m.state.epoch = epoch + 1;
    m.state.batch = 0;
    if (!o.checkpoint.empty()) save_fit_checkpoint(*this, m, callbacks_, epoch + 1, 0);
    if (r.preempted || (o.stop_after_steps > 0 && run_steps >= o.stop_after_steps)) tell_stop();  // at its last step
    if (stop_requested_) out << "stopped after epoch " << epoch + 1 << " (requested by a callback)\n";
    stop = stop || stop_requested_ ||
           (o.stop_after_epochs > 0 && static_cast<int64_t>(r.epochs.size()) >= o.stop_after_epochs);
  }
  r.steps = m.state.step;
  r.epochs_done = m.state.epoch;
  r.stopped_early = m.state.step < total_steps;
  r.skipped_steps = m.mp.skipped_steps();
  r.samples_per_sec = train_seconds > 0 ? static_cast<double>(samples) / train_seconds : 0;
  r.checkpoints = m.checkpoints;
  r.checkpoint_seconds = m.checkpoint_seconds;
  r.graph_replays = m.graphed ? m.graphed->replays() : 0;
  r.seconds = seconds_between(start, Clock::now());
  for (auto& cb : callbacks_) cb->on_train_end(*this, r);
  return r;
}

}  // namespace kiln::train
