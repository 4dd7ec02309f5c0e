// GraphedStep (see graph_step.h).
#include "train/graph_step.h"

#include "core/grad_mode.h"
#include "core/ops.h"

namespace kiln::train {

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
