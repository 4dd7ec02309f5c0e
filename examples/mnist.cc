// The main job: trains an MLP or a CNN on Fashion-MNIST on the best device present, prints a
// progress line as it goes and a test evaluation each epoch, and ends with one JSON line.
//   tools/bazel run //examples:mnist -- --model cnn --epochs 3
#include <chrono>
#include <cstdio>
#include <iostream>
#include <optional>

#include "core/matmul_precision.h"
#include "data/dataloader.h"
#include "data/mnist.h"
#include "distributed/launch/exit_codes.h"
#include "models/mlp_cnn.h"
#include "examples/mnist_flags.h"
#include "train/trainer.h"

using namespace kiln;

namespace {

constexpr const char* kAmpNotes = R"(
--amp f16|bf16 runs matmul/conv in f16/bf16 under autocast (f16 with dynamic loss scaling);
--amp-mode o2 converts the model to that dtype with f32 master weights in the optimizer.
--matmul-precision high allows TF32 tensor cores for f32 GEMMs and convolutions on GPUs.
--ddp trains on the ranks started by //distributed/launch, srun or mpirun (--batch-size is per
rank; Gloo on CPU); --zero 1 adds ZeRO stage 1 (each rank keeps 1/N of the optimizer state).
SIGTERM or SIGINT: every rank finishes its step, the checkpoint is written to --save (rank 0,
atomically) and the job exits with status 75 ("preempted"; continue with --resume); a second
signal exits at once. --save-every N adds a checkpoint every N steps.
--profile DIR records steps wait..wait+warmup+active (--profile-steps, default 5,2,5), writes
DIR/trace.rank<R>.json (chrome://tracing, ui.perfetto.dev) and prints the op table;
--logdir DIR writes TensorBoard scalars (rank 0). Every --log-every steps a breakdown line gives
data/forward/backward/exposed-comm/optimizer/rest per step, samples/s, GFLOP/s and MFU.
--pipeline-stages P splits the model into P stages, one per rank started by //distributed/launch
(--nproc-per-node P); each batch flows through them in --micro-batches M parts. With --ddp the
job runs P stages x (world / P) data-parallel replicas. --pipeline-schedule interleaved
--virtual-stages V gives each rank V chunks of the model (M a multiple of P): a smaller bubble.
)";

}  // namespace

int main(int argc, char** argv) {
  examples::MnistFlags flags;
  if (int rc = flags.parse(argc, argv, "mnist", "Trains an MLP or a CNN on Fashion-MNIST on the best device present.",
                           kAmpNotes);
      rc >= 0)
    return rc;
  const train::TrainConfig& config = flags.c;
  try {
    train::TrainResult r = train::train(config, std::cout);
    if (r.rank == 0) std::cout << train::result_json(config, r) << std::endl;
    return r.preempted ? dist::kExitPreempted : 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "mnist: %s\n", e.what());
    return 1;
  }
}
