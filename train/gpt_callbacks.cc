// The GPT recipe's callbacks (see gpt_callbacks.h).
#include "train/gpt_callbacks.h"

#include <algorithm>

#include "amp/grad_scaler.h"
#include "core/error.h"
#include "core/ops.h"
#include "distributed/backend/process_group.h"

namespace kiln::train::gpt {

void RunSignature::save_state(const std::string& path, TrainingState& state, int rank) {
  state.extra["gpt"] = signature_;
  out_ << fmt::format("saving {} at step {}\n", path, state.step);
}

void RunSignature::load_state(const std::string& path, const TrainingState& state) {
  const std::string saved = state.extra.count("gpt") ? state.extra.at("gpt") : "(none)";
  KILN_CHECK(saved == signature_, "--resume {}: the checkpoint's run ({}) differs from this one ({})", path, saved,
             signature_);
  out_ << fmt::format("resumed from {} at step {}\n", path, state.step);
}

StepReport::StepReport(const TrainConfig& c, TrainResult& result, data::DataLoader& val, int64_t seq_len,
                       int64_t tokens_per_step, double flops_per_token, std::ostream& out)
    : c_(c),
      r_(result),
      val_(val),
      seq_len_(seq_len),
      tokens_per_step_(tokens_per_step),
      flops_per_token_(flops_per_token),
      out_(out) {}

StepReport::~StepReport() = default;

void StepReport::on_train_begin(Trainer& trainer) {
  times_ = StepTimes{};
  last_ = c_.stop_after_steps > 0 ? std::min(c_.max_steps, trainer.step() + c_.stop_after_steps) : c_.max_steps;
  // --profile: as the main job's, on this invocation's steps (wait, record and drop warm-up, keep
  // active); then the op table and the kernel classes are printed.
  if (!c_.profile_dir.empty())
    monitor_ = std::make_unique<RunMonitor>(
        MonitorConfig{.profile_dir = c_.profile_dir,
                      .schedule = {.wait = c_.profile_wait, .warmup = c_.profile_warmup, .active = c_.profile_active},
                      .log_every = int64_t{1} << 40},
        trainer.rank(), 0.0, trainer.options().device.is_cuda(), out_);
  if (monitor_) monitor_->step_begin();
  times_.begin();
}

void StepReport::on_step_end(Trainer& trainer, const StepMetrics& step) {
  double loss = step.loss;
  if (dist::ProcessGroup* pg = trainer.process_group()) {
    Tensor l = tensor({loss}, dtype(kFloat64));
    pg->allreduce(l, dist::ReduceOp::kAvg)->wait();
    loss = l.item<double>();
  }
  const double dt = times_.record(r_, loss, tokens_per_step_, trainer.options().device);
  const amp::GradScaler& scaler = trainer.loss_scaler();
  if (monitor_) monitor_->step_end(tokens_per_step_ / seq_len_, loss, step.lr, step.grad_norm, scaler.scale());
  if (step.step % c_.log_every == 0 || step.step == last_) {
    const double tok_s = static_cast<double>(tokens_per_step_) / dt;
    const double mfu = flops_per_token_ * static_cast<double>(tokens_per_step_) / dt / r_.peak_flops;
    const std::string norm = step.grad_norm >= 0 ? fmt::format(" | norm {:.3f}", step.grad_norm) : "";
    out_ << fmt::format("step {}/{} | loss {:.4f} | lr {:.3e}{} | {:.0f} ms | {:.0f} tok/s | mfu {:.1f}%{}\n", step.step,
                        c_.max_steps, loss, step.lr, norm, dt * 1e3, tok_s, 100 * mfu, scaler_note(scaler));
  }
  validate_if_due(c_, step.step, [&] { return trainer.evaluate(val_).loss; }, r_, out_);
  if (monitor_) monitor_->step_begin();
  times_.begin();  // the next step's time starts here, validation and logging left out
}

void StepReport::on_train_end(Trainer&, const FitResult&) {
  monitor_.reset();  // a run that ended inside the profiled steps keeps what was recorded
}

void StepReport::finish(const Device& device) { times_.finish(r_, flops_per_token_, device); }

}  // namespace kiln::train::gpt
