// GraphedStep and the --cuda-graph checks (see graph_step.h).
#include "train/graph_step.h"

#include "core/grad_mode.h"
#include "core/ops.h"

namespace kiln::train {

std::string cuda_graph_problem(const TrainConfig& c) {
  if (!c.cuda_graph) return {};
  if (!c.device.is_cuda())
    return fmt::format("--cuda-graph needs a CUDA device (--device cuda); this run is on {}", c.device);
  if (c.ddp || c.pipeline_stages > 1)
    return "--cuda-graph runs in one process: not with --ddp or --pipeline-stages (their communication is not "
           "captured)";
  if (c.amp == "f16")
    return "--cuda-graph: --amp f16's loss scaling decides on the host whether to skip each step; use --amp bf16 "
           "or none";
  if (c.optimizer != "sgd")
    return fmt::format("--cuda-graph: --optimizer {} counts its steps on the host (bias correction), which a replay "
                       "would freeze; use --optimizer sgd",
                       c.optimizer);
  if (c.schedule != "constant")
    return fmt::format("--cuda-graph replays the optimizer step with the learning rate it was captured with: "
                       "--schedule {} needs a new one each step; use --schedule constant",
                       c.schedule);
  if (c.dropout > 0)
    return fmt::format("--cuda-graph: --dropout {} needs a new random mask each step, and a replay repeats the "
                       "captured one",
                       c.dropout);
  if (!c.profile_dir.empty())
    return "--cuda-graph: --profile times each kernel with events, which cannot be recorded inside a graph";
  return {};
}

GraphedStep::GraphedStep(Device device, int64_t batch_size, StepFn step)
    : device_(device),
      batch_size_(batch_size),
      step_(std::move(step)),
      loss_sum_(zeros({}, dtype(kFloat32).device(device))) {}

namespace {
/// `sum += loss` on the device, outside autograd.
void accumulate(Tensor& sum, const Tensor& loss) {
  NoGradGuard g;
  sum.add_(loss.detach().to(kFloat32));
}
}  // namespace

void GraphedStep::run(const Tensor& x, const Tensor& y) {
  const bool full = x.size(0) == batch_size_;
  if (!full || warm_steps_ < kWarmupSteps) {
    last_loss_ = step_(x.to(device_), y.to(device_));
    accumulate(loss_sum_, last_loss_);
    if (full) ++warm_steps_;
    return;
  }
  if (!graph_) capture(x, y);
  static_x_.copy_(x);
  static_y_.copy_(y);
  graph_->replay();
  ++replays_;
  last_loss_ = static_loss_;
}

void GraphedStep::capture(const Tensor& x, const Tensor& y) {
  // Buffers of the batch's shape and dtype that every replay reads; filled before each replay.
  static_x_ = zeros(x.sizes(), dtype(x.dtype()).device(device_));
  static_y_ = zeros(y.sizes(), dtype(y.dtype()).device(device_));
  graph_ = make_device_graph(device_);
  // Records the step without running it: the replay that follows is this batch's step.
  graph_->capture([&] {
    static_loss_ = step_(static_x_, static_y_);
    accumulate(loss_sum_, static_loss_);
  });
}

double GraphedStep::last_loss() const { return last_loss_.defined() ? last_loss_.item<double>() : 0.0; }

double GraphedStep::take_loss_sum() {
  const double sum = loss_sum_.item<double>();
  loss_sum_.zero_();  // in place: the graph adds into this very tensor
  return sum;
}

}  // namespace kiln::train
