// train::Trainer::fit: epochs of micro-batches grouped into optimizer steps, with validation,
// callbacks, progress lines and checkpoints (set-up and the strategies are in fit.cc).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <optional>

#include "optim/clip.h"
#include "optim/lr_scheduler.h"
#include "train/callback.h"
#include "train/fit_impl.h"
#include "train/fit_parts.h"
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
  const bool resume =
      !o.resume_from.empty() || (o.resume && !o.checkpoint.empty() && std::filesystem::exists(o.checkpoint));
  if (!m.resumed && resume)
    load_fit_checkpoint(*this, m, callbacks_);
  m.resumed = true;

  std::unique_ptr<data::DataLoader> shard = m.pg ? shard_loader(train_loader, m.rank, m.world) : nullptr;
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

  for (auto& cb : callbacks_) cb->on_train_begin(*this);
  double train_seconds = 0;
  int64_t samples = 0, run_steps = 0;
  const auto train_start = Clock::now();
  const int64_t first_epoch = m.state.epoch;
  bool stop = stop_requested_ || m.state.step >= total_steps;
  for (int64_t epoch = first_epoch; epoch < last_epoch && !stop; ++epoch) {
    const int64_t first_batch = epoch == first_epoch ? m.state.batch : 0;
    m.state.epoch = epoch;
    loader.set_epoch(epoch);
    loader.set_start_batch(first_batch);
    model_->train();
    const auto epoch_start = Clock::now();
    int64_t b = first_batch, in_group = 0, group_n = 0, epoch_steps = 0;
    double group_loss = 0, epoch_loss = 0;
    Window window;
    for (data::Example& batch : loader) {
      if (in_group == 0) {
        group_n = std::min(o.grad_accum, batches - b);
        opt_->zero_grad();
        group_loss = 0;
      }
      Tensor x = batch.data.to(o.device), y = batch.target.to(o.device);
      {
        std::optional<dist::DistributedDataParallel::NoSyncGuard> no_sync;
        if (m.ddp && in_group + 1 < group_n) no_sync.emplace(*m.ddp);  // all-reduce once, on the last
        Tensor loss;
        {
          amp::AutocastGuard autocast = m.mp.autocast();
          loss = fit_loss(o, net(x), y);
        }
        m.mp.backward(group_n > 1 ? loss / static_cast<double>(group_n) : loss);
        group_loss += loss.item<double>();
      }
      const int64_t n = batch.target.defined() && batch.target.dim() > 0 ? batch.target.size(0) : x.size(0);
      samples += n * m.world;
      window.samples += n * m.world;
      ++b;
      if (++in_group < group_n) continue;
      in_group = 0;

      StepMetrics step{.epoch = epoch, .loss = group_loss / static_cast<double>(group_n)};
      if (o.clip_grad_norm > 0) {
        if (m.mp.scaler().is_enabled()) m.mp.scaler().unscale_(*opt_);  // clip the true gradients
        step.grad_norm = m.zero ? m.zero->clip_grad_norm_(o.clip_grad_norm)
                                : optim::clip_grad_norm_(model_->parameters(), o.clip_grad_norm);
      }
      if (cosine) opt_->set_lr(cosine->lr_at(m.state.step, o.lr));
      if (o.schedule == Schedule::warmup_cosine) opt_->set_lr(scheduled_lr(o, m.state.step, total_steps));
      step.lr = opt_->lr();
      m.mp.step(*opt_);
      step.step = ++m.state.step;
      ++run_steps;
      ++epoch_steps;
      epoch_loss += step.loss;
      r.step_losses.push_back(step.loss);
      window.loss_sum += step.loss;
      ++window.steps;
      for (auto& cb : callbacks_) cb->on_step_end(*this, step);
      if (o.log_every > 0 && m.state.step % o.log_every == 0) {
        const auto now = Clock::now();
        out << progress_line({.step = m.state.step, .total_steps = total_steps, .epoch = epoch + 1,
                              .epochs = last_epoch, .loss = window.loss_sum / static_cast<double>(window.steps),
                              .samples_per_sec = static_cast<double>(window.samples) / seconds_between(window.start, now),
                              .elapsed_s = seconds_between(train_start, now), .run_steps = run_steps})
            << "\n" << std::flush;  // read while it runs, and block-buffered when redirected
        window = Window{};
      }
      stop = stop_requested_ || m.state.step >= total_steps;
      const bool mid_epoch = b < batches;  // the epoch's end saves the epoch's last step
      if (!o.checkpoint.empty() && mid_epoch && (stop || (o.save_every > 0 && m.state.step % o.save_every == 0)))
        save_fit_checkpoint(*this, m, callbacks_, epoch, b);
      m.state.batch = b;
      if (stop) break;
    }
    const double epoch_seconds = seconds_between(epoch_start, Clock::now());
    train_seconds += epoch_seconds;
    if (b < batches) {  // stopped inside the epoch
      out << "stopped after step " << m.state.step << (o.checkpoint.empty() ? "" : ", saved to " + o.checkpoint)
          << "\n";
      break;
    }
    EpochMetrics em{.epoch = epoch, .train_loss = epoch_loss / static_cast<double>(std::max<int64_t>(epoch_steps, 1)),
                    .seconds = epoch_seconds};
    if (m.pg) {
      Tensor l = tensor({em.train_loss}, dtype(kFloat64));
      m.pg->allreduce(l, dist::ReduceOp::kAvg)->wait();
      em.train_loss = l.item<double>();
    }
    if (val != nullptr) {
      for (auto& cb : callbacks_) cb->on_validation_begin(*this);
      const EvalMetrics ev = evaluate(*val);
      for (auto& cb : callbacks_) cb->on_validation_end(*this);
      em.val_loss = r.val_loss = ev.loss;
      em.val_accuracy = r.val_accuracy = ev.accuracy;
    }
    em.lr = opt_->lr();
    out << fmt::format("epoch {}/{} done: train_loss {:.4f}", epoch + 1, last_epoch, em.train_loss);
    if (em.val_loss) out << fmt::format(" val_loss {:.4f}", *em.val_loss);
    if (em.val_accuracy) out << fmt::format(" val_accuracy {:.4f}", *em.val_accuracy);
    out << fmt::format(" ({:.0f} samples/s)\n", static_cast<double>(samples) / std::max(train_seconds, 1e-9))
        << std::flush;
    for (auto& cb : callbacks_) cb->on_epoch_end(*this, em);
    r.epochs.push_back(em);
    m.state.epoch = epoch + 1;
    m.state.batch = 0;
    if (!o.checkpoint.empty()) save_fit_checkpoint(*this, m, callbacks_, epoch + 1, 0);
    stop = stop || stop_requested_;
    if (stop_requested_) out << "stopped after epoch " << epoch + 1 << " (requested by a callback)\n";
  }
  r.steps = m.state.step;
  r.epochs_done = m.state.epoch;
  r.stopped_early = m.state.step < total_steps;
  r.skipped_steps = m.mp.skipped_steps();
  r.samples_per_sec = train_seconds > 0 ? static_cast<double>(samples) / train_seconds : 0;
  r.checkpoints = m.checkpoints;
  r.checkpoint_seconds = m.checkpoint_seconds;
  r.seconds = seconds_between(start, Clock::now());
  for (auto& cb : callbacks_) cb->on_train_end(*this, r);
  return r;
}

}  // namespace kiln::train
