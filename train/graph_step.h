// The Trainer's cuda_graph option (train/fit.h; the main job's --cuda-graph): the whole training
// step (zero the gradients in place, forward, loss, backward, optimizer step) captured once as a
// device graph (core/device_graph.h: CUDA graphs) after a few eager warm-up steps, then replayed
// for every full batch, the batch first copied into static input buffers. A replay repeats the
// captured kernels with their captured arguments, so what would have to change per step is
// refused up front (the Trainer's option checks; the flags' in train/trainer.h): a learning-rate
// schedule, Adam's step count, dropout's seed, loss scaling's host decisions, and data-parallel or
// pipeline communication.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/device_graph.h"
#include "core/tensor.h"

namespace kiln::train {

/// One training step at a time, eager or replayed. `step(x, y)` runs one step eagerly and returns
/// its loss; it is also the function captured, so it must zero the gradients in place (a replay
/// writes the gradient tensors the capture saw) and must not read anything back to the host.
class GraphedStep {
 public:
  using StepFn = std::function<Tensor(const Tensor& x, const Tensor& y)>;
  /// Full-batch steps run eagerly before the capture: the first seeds SGD's momentum buffers (a
  /// different kernel), and the others let lazily made state (cuBLAS plans) settle.
  static constexpr int64_t kWarmupSteps = 3;

  GraphedStep(Device device, int64_t batch_size, StepFn step);
  /// One step on a batch (on any device): eager while warming up and for a batch of another size
  /// (an epoch's last, partial one), else copied into the static buffers and replayed, captured
  /// first on the first such step. The loss is added into the device-side sum; nothing is read.
  void run(const Tensor& x, const Tensor& y);
  /// The last step's loss, read from the device (a synchronisation: call it only to log).
  double last_loss() const;
  /// The sum of the step losses since the last take_loss_sum(), read from the device; restarts it.
  double take_loss_sum();
  int64_t replays() const { return replays_; }
  bool captured() const { return graph_ != nullptr; }

 private:
  void capture(const Tensor& x, const Tensor& y);

  Device device_;
  int64_t batch_size_;
  StepFn step_;
  int64_t warm_steps_ = 0, replays_ = 0;
  Tensor loss_sum_;  // f32 scalar on the device; the graph adds into it, so it is zeroed in place
  Tensor static_x_, static_y_, static_loss_, last_loss_;
  std::unique_ptr<DeviceGraph> graph_;  // last: destroyed first, before the buffers it uses
};

}  // namespace kiln::train
