#include "train/run_monitor.h"

#include <fmt/format.h>

#include <cmath>

#include "core/ops.h"
#include "profiler/key_averages.h"
#include "profiler/memory.h"
#include "distributed/data_parallel/ddp.h"

namespace kiln::train {
namespace {

const char* kPhaseNames[] = {"data", "forward", "backward", "fwd+bwd (pipeline)", "exposed comm", "optimizer", "rest"};

double seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

RunMonitor::RunMonitor(MonitorConfig config, int rank, double flops_per_sample, bool device_is_cuda, std::ostream& out)
    : config_(std::move(config)), rank_(rank), flops_per_sample_(flops_per_sample), out_(out) {
  if (config_.peak_gflops > 0) {
    peak_flops_ = config_.peak_gflops * 1e9;
    peak_source_ = "--peak-gflops";
  } else if (!device_is_cuda && flops_per_sample_ > 0) {
    peak_flops_ = measured_cpu_gemm_flops(&peak_source_);
  } else {
    peak_source_ = "unknown (pass --peak-gflops with the GPU's peak for the dtype trained in)";
  }
  if (flops_per_sample_ > 0)
    out_ << fmt::format("monitor: {:.1f} MFLOP per training sample (3 x forward), peak {} GFLOP/s from {}\n",
                        3 * flops_per_sample_ / 1e6, peak_flops_ > 0 ? fmt::format("{:.0f}", peak_flops_ / 1e9) : "?",
                        peak_source_);
  if (!config_.logdir.empty() && rank_ == 0) {
    logdir_ = std::make_unique<profiler::SummaryWriter>(config_.logdir);
    out_ << "tensorboard: writing " << logdir_->path() << "\n";
  }
  schedule_step();
}

RunMonitor::~RunMonitor() {
  if (prof_ && prof_->recording() && !saved_profile_) {
    try {
      finish_profile();  // the run ended inside the active window: keep what was recorded
    } catch (const std::exception& e) {
      out_ << "profiler: " << e.what() << "\n";
    }
  }
}

void RunMonitor::schedule_step() {
  if (config_.profile_dir.empty() || saved_profile_) return;
  profiler::ProfilerAction a = config_.schedule.at(step_);
  if (a == profiler::ProfilerAction::kNone) return;
  if (!prof_) prof_ = std::make_unique<profiler::Profiler>(profiler::ProfilerOptions{.record_shapes = true, .rank = rank_});
  const bool warm = a == profiler::ProfilerAction::kWarmup;
  const bool first_active = !warm && config_.schedule.at(step_ - 1) == profiler::ProfilerAction::kWarmup;
  if (first_active && prof_->recording()) prof_->stop();  // warm-up steps are recorded, then dropped
  if (!prof_->recording()) prof_->start();
}

void RunMonitor::finish_profile() {
  prof_->stop();
  saved_profile_ = true;
  std::string path = fmt::format("{}/trace.rank{}.json", config_.profile_dir, rank_);
  prof_->export_chrome_trace(path);
  if (rank_ == 0) {
    out_ << fmt::format("profiler: {} events over {} active steps; Chrome trace of each rank in {}/trace.rank<R>.json\n",
                        prof_->events().size(), config_.schedule.active, config_.profile_dir);
    const profiler::KeyAverages averages = prof_->key_averages();
    out_ << averages.table(30);
    out_ << averages.kernel_class_table();
    out_ << profiler::memory_summary();
  }
}

void RunMonitor::step_begin() {
  data_start_ = Clock::now();
  if (window_steps_ == 0) window_start_ = data_start_;  // a window starts at its first step, not before
}

void RunMonitor::add(Phase p, double s) {
  phase_s_[static_cast<int>(p)] += s;
  total_s_[static_cast<int>(p)] += s;
}

void RunMonitor::data_ready() {
  auto now = Clock::now();
  add(Phase::kData, seconds(now - data_start_));
  if (profiler::is_recording()) {
    profiler::Event e;
    e.name = "data wait";
    e.category = "data";
    e.start_ns = profiler::to_profiler_ns(data_start_);
    e.end_ns = profiler::to_profiler_ns(now);
    profiler::record(std::move(e));
  }
  step_start_ = data_start_;
  last_ = now;
}

void RunMonitor::mark(Phase p) {
  auto now = Clock::now();
  add(p, seconds(now - last_));
  last_ = now;
}

void RunMonitor::comm(double comm_s, double exposed_s) {
  // The backward phase included the wait: move it to its own column.
  add(Phase::kBackward, -exposed_s);
  add(Phase::kExposedComm, exposed_s);
  comm_total_s_ += comm_s;
}

void RunMonitor::step_end(int64_t samples, double loss, double lr, double grad_norm, double loss_scale) {
  auto now = Clock::now();
  add(Phase::kRest, seconds(now - last_));
  step_total_s_ += seconds(now - step_start_);
  ++window_steps_;
  window_samples_ += samples;
  ++step_;
  if (prof_ && prof_->recording() && config_.schedule.at(step_ - 1) == profiler::ProfilerAction::kRecordAndSave)
    finish_profile();
  if (step_ % config_.log_every == 0) {
    const double window = seconds(now - window_start_), n = static_cast<double>(window_steps_);
    const double sps = static_cast<double>(window_samples_) / window;
    std::string line = "breakdown per step:";
    const bool pipelined = phase_s_[static_cast<int>(Phase::kForwardBackward)] > 0;
    for (int i = 0; i < static_cast<int>(Phase::kCount); ++i) {
      const auto p = static_cast<Phase>(i);
      if (pipelined ? (p == Phase::kForward || p == Phase::kBackward) : p == Phase::kForwardBackward) continue;
      line += fmt::format(" {} {:.2f} ms", kPhaseNames[i], 1e3 * phase_s_[i] / n);
    }
    if (comm_total_s_ > 0) {
      double exposed = phase_s_[static_cast<int>(Phase::kExposedComm)];
      line += fmt::format(" | comm {:.2f} ms/step, {:.0f}% hidden behind backward", 1e3 * comm_total_s_ / n,
                          100 * std::max(0.0, 1 - exposed / comm_total_s_));
    }
    line += fmt::format(" | {:.0f} samples/s", sps);
    if (flops_per_sample_ > 0) {
      double achieved = 3 * flops_per_sample_ * sps;
      line += fmt::format(" | {:.2f} GFLOP/s", achieved / 1e9);
      if (peak_flops_ > 0) {
        last_mfu_ = achieved / peak_flops_;
        line += fmt::format(" MFU {:.1f}%", 100 * last_mfu_);
      }
    }
    out_ << line << "\n";
    if (logdir_) {
      if (!std::isnan(loss)) logdir_->add_scalar("train/loss", loss, step_);  // NaN: not known on this rank
      logdir_->add_scalar("train/lr", lr, step_);
      if (grad_norm >= 0) logdir_->add_scalar("train/grad_norm", grad_norm, step_);
      logdir_->add_scalar("train/loss_scale", loss_scale, step_);
      logdir_->add_scalar("train/samples_per_sec", sps, step_);
    }
    std::fill(std::begin(phase_s_), std::end(phase_s_), 0.0);
    comm_total_s_ = 0;
    window_steps_ = window_samples_ = 0;
    window_start_ = now;
  }
  schedule_step();
  data_start_ = Clock::now();
}

void RunMonitor::on_epoch_begin(Trainer&, int64_t) {
  in_step_ = false;
  step_begin();
}

void RunMonitor::on_batch_begin(Trainer&, const data::Example&) {
  if (in_step_) {
    mark(Phase::kData);  // a later micro-batch of the step
    return;
  }
  in_step_ = true;
  data_ready();
}

void RunMonitor::on_after_forward(Trainer& trainer, const Tensor&) {
  // A pipeline step runs forward and backward interleaved: one phase.
  mark(std::holds_alternative<Pipeline>(trainer.options().strategy) ? Phase::kForwardBackward : Phase::kForward);
}

void RunMonitor::on_after_backward(Trainer&) { mark(Phase::kBackward); }

void RunMonitor::on_before_optimizer_step(Trainer& trainer) {
  // The gradients as the optimizer will see them (the DDP-averaged ones), only when logged.
  if (logs_this_step()) step_grad_norm_ = grad_norm(trainer.model().parameters());
  if (const dist::DistributedDataParallel* ddp = trainer.ddp())
    comm(ddp->stats().comm_seconds, ddp->stats().exposed_seconds);  // the step's last, synced backward
  mark(Phase::kRest);
}

void RunMonitor::on_step_end(Trainer& trainer, const StepMetrics& step) {
  if (!trainer.options().cuda_graph) mark(Phase::kOptimizer);  // a replayed step's host time shows as rest
  double loss = step.loss;
  if (logs_this_step()) {
    if (std::isnan(loss)) loss = trainer.last_loss();  // cuda_graph: read from the device only to log
    if (step_grad_norm_ < 0) step_grad_norm_ = grad_norm(trainer.model().parameters());
  }
  step_end(step.samples, loss, step.lr, step_grad_norm_, step.loss_scale);
  step_grad_norm_ = -1;
  in_step_ = false;
}

void RunMonitor::on_epoch_end(Trainer& trainer, const EpochMetrics& metrics) {
  if (metrics.val_loss && metrics.val_accuracy) test_metrics(*metrics.val_loss, *metrics.val_accuracy, trainer.step());
}

void RunMonitor::test_metrics(double loss, double accuracy, int64_t step) {
  if (!logdir_) return;
  logdir_->add_scalar("test/loss", loss, step);
  logdir_->add_scalar("test/accuracy", accuracy, step);
}

double forward_flops(const std::function<void()>& forward_one_sample) {
  if (profiler::is_recording()) return 0;
  NoGradGuard g;
  // The count must not move the run's random stream (dropout draws in training mode), or a resumed
  // run, which counts again, would diverge from an uninterrupted one.
  const GeneratorState rng = default_generator().state();
  profiler::Profiler prof({.profile_memory = false});
  prof.start();
  forward_one_sample();
  prof.stop();
  default_generator().set_state(rng);
  return prof.key_averages().total_flops();
}

double grad_norm(const std::vector<Tensor>& params) {
  NoGradGuard g;
  double sum = 0;
  for (const Tensor& p : params)
    if (p.grad().defined()) sum += p.grad().to(kCPU, kFloat64).square().sum().item<double>();
  return std::sqrt(sum);
}

}  // namespace kiln::train
