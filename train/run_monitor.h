// What the trainers report beyond their progress lines, from flags shared by every trainer
// (--profile, --profile-steps, --logdir, --peak-gflops): the per-interval step breakdown (data
// wait, forward, backward, exposed communication, optimizer, rest), samples/s, achieved FLOP/s
// and MFU; a profiler run on a wait/warmup/active schedule that writes one Chrome trace per
// rank and prints the key_averages table; TensorBoard scalars (rank 0 only). A train::Trainer
// callback (its step hooks mark the phases); loops of their own call the marks directly.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "profiler/gemm_rate.h"
#include "profiler/profiler.h"
#include "profiler/schedule.h"
#include "profiler/tensorboard.h"
#include "train/callback.h"

namespace kiln::train {

using profiler::measured_cpu_gemm_flops;  // profiler/gemm_rate.h

struct MonitorConfig {
  std::string profile_dir;          // "": no profiling
  profiler::Schedule schedule{.wait = 5, .warmup = 2, .active = 5, .repeat = 1};
  std::string logdir;               // "": no TensorBoard
  double peak_gflops = 0;           // 0: measure the CPU's f32 GEMM rate / unknown on CUDA
  int64_t log_every = 100;
};

/// kForwardBackward: a pipeline step, whose schedule interleaves forwards, backwards and
/// transfers (its lines show it in place of forward and backward).
enum class Phase { kData, kForward, kBackward, kForwardBackward, kExposedComm, kOptimizer, kRest, kCount };

class RunMonitor : public Callback {
 public:
  /// `flops_per_sample`: forward FLOPs of one sample (training counts 3x: forward + backward);
  /// 0 when unknown. `device_is_cuda` decides how the peak is known.
  RunMonitor(MonitorConfig config, int rank, double flops_per_sample, bool device_is_cuda, std::ostream& out);
  ~RunMonitor();

  /// Marks the start of a step's data wait (call before fetching the batch; the previous
  /// step_end() does it for you).
  void step_begin();
  /// The batch arrived: the time since step_begin is the data wait.
  void data_ready();
  /// The phase that just ended (forward, backward, optimizer); time since the last mark.
  void mark(Phase p);
  /// Of the backward just measured, `exposed_s` waited for communication (DDP stats) and
  /// `comm_s` is the communication that ran (hidden + exposed).
  void comm(double comm_s, double exposed_s);
  /// The step ended with `samples` samples (all ranks) and `loss`; `lr`, `grad_norm` (<0: not
  /// computed), `loss_scale` are logged to TensorBoard at interval ends.
  void step_end(int64_t samples, double loss, double lr, double grad_norm, double loss_scale);
  /// Whether step_end of this step will log (callers compute the grad norm only then).
  bool logs_this_step() const { return logdir_ != nullptr && (step_ + 1) % config_.log_every == 0; }
  void test_metrics(double loss, double accuracy, int64_t step);
  /// "how the peak is known", for the closing line.
  const std::string& peak_source() const { return peak_source_; }
  double mfu() const { return last_mfu_; }
  /// Seconds of each phase over the whole run (not only the current interval), and of the steps
  /// themselves (each from its data wait to its step_end): every interval between the marks goes
  /// to exactly one phase, so the phases sum to the step time.
  double total_seconds(Phase p) const { return total_s_[static_cast<int>(p)]; }
  double step_seconds() const { return step_total_s_; }

  // As a Trainer callback: the epoch's start begins the first data wait; a step's first
  // micro-batch ends it (later micro-batches' waits count as data too); forward, backward, and
  // what runs before the optimizer (clipping, the schedule: "rest") are marked by their hooks;
  // DDP's exposed communication moves from backward to its own column; the step's end marks the
  // optimizer. Epoch ends send the validation metrics to TensorBoard.
  void on_epoch_begin(Trainer& trainer, int64_t epoch) override;
  void on_batch_begin(Trainer& trainer, const data::Example& batch) override;
  void on_after_forward(Trainer& trainer, const Tensor& loss) override;
  void on_after_backward(Trainer& trainer) override;
  void on_before_optimizer_step(Trainer& trainer) override;
  void on_step_end(Trainer& trainer, const StepMetrics& step) override;
  void on_epoch_end(Trainer& trainer, const EpochMetrics& metrics) override;

 private:
  void schedule_step();
  void finish_profile();
  void add(Phase p, double s);
  using Clock = std::chrono::steady_clock;
  MonitorConfig config_;
  int rank_;
  double flops_per_sample_;
  std::ostream& out_;
  double peak_flops_ = 0;
  std::string peak_source_;
  int64_t step_ = 0;
  Clock::time_point last_ = Clock::now(), step_start_ = last_, data_start_ = last_, window_start_ = last_;
  double phase_s_[static_cast<int>(Phase::kCount)] = {};
  double total_s_[static_cast<int>(Phase::kCount)] = {};
  double step_total_s_ = 0;
  bool in_step_ = false;  // callback: a micro-batch of the step has arrived
  double step_grad_norm_ = -1;  // callback: the step's gradient norm, when computed
  double comm_total_s_ = 0;
  int64_t window_steps_ = 0, window_samples_ = 0;
  double last_mfu_ = -1;
  std::unique_ptr<profiler::Profiler> prof_;
  bool saved_profile_ = false;
  std::unique_ptr<profiler::SummaryWriter> logdir_;
};

/// Seconds of steady-clock time since `t` (the trainers' wall-time and checkpoint timers).
inline double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

/// Forward FLOPs of one sample through `forward` (run once under the profiler without grad).
double forward_flops(const std::function<void()>& forward_one_sample);

/// The sum of squares of the parameters' gradients, square-rooted (the global L2 norm).
double grad_norm(const std::vector<Tensor>& params);

}  // namespace kiln::train
