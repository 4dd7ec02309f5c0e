// The main job: trains an MLP or a CNN on Fashion-MNIST on the best device present, prints a
// progress line as it goes and a test evaluation each epoch, and ends with one JSON line.
//   tools/bazel run //examples:mnist -- --model cnn --epochs 3
#include <chrono>
#include <cstdio>
#include <iostream>

#include "core/matmul_precision.h"
#include "data/dataloader.h"
#include "data/mnist.h"
#include "examples/flags.h"
#include "examples/models.h"
#include "examples/trainer.h"
#include "nn/checkpoint.h"

using namespace kiln;
using kiln::examples::Flags;
using kiln::examples::UsageError;

namespace {

constexpr const char* kUsage = R"(usage: mnist [flags]
  --model mlp|cnn            model to train (default mlp)
  --epochs N                 epochs to train (default 3)
  --batch-size N             batch size (default 128)
  --lr X                     learning rate (default 0.05 for sgd, 1e-3 for adam/adamw)
  --optimizer sgd|adam|adamw optimizer (default sgd, with momentum 0.9)
  --schedule cosine|constant learning-rate schedule over the run (default cosine, per step)
  --seed N                   seed for init and data order (default 0)
  --threads N                CPU threads (default: all cores)
  --device cpu|cuda|cuda:N   device (default: the best present)
  --data-dir DIR             Fashion-MNIST/MNIST IDX files (default /usr/share/datasets/fashion-mnist)
  --save PATH                checkpoint after every epoch (safetensors)
  --resume PATH              continue the run saved in PATH
  --stop-after-epochs N      stop after N epochs of this invocation (resume later with --resume)
  --limit-train N            use only the first N training images (quick runs)
  --log-every N              steps between progress lines (default 100)
  --workers N                data loader worker threads (default 0: batches gathered inline)
  --amp none|f16|bf16        mixed precision (default none): matmul/conv in f16/bf16 under
                             autocast, f16 with dynamic loss scaling
  --amp-mode o1|o2           o1: f32 model under autocast (default); o2: the model in
                             f16/bf16 with f32 master weights in the optimizer
  --matmul-precision highest|high
                             f32 GEMMs and convolutions on GPUs: highest (default) keeps
                             full f32; high allows TF32 tensor cores
  --ddp                      data parallel across the ranks started by //distributed:launch
                             (--batch-size is per rank; Gloo on CPU)
)";

examples::TrainConfig parse(int argc, char** argv) {
  Flags f(argc, argv,
          {"model", "epochs", "batch-size", "lr", "optimizer", "seed", "threads", "device", "data-dir", "save",
           "resume", "limit-train", "log-every", "workers", "schedule", "stop-after-epochs",
           "amp", "amp-mode", "matmul-precision"},
          {"ddp"});
  examples::TrainConfig c;
  c.model = f.get_choice("model", "mlp", {"mlp", "cnn"});
  c.epochs = f.get_int("epochs", 3, 1, 1000);
  c.batch_size = f.get_int("batch-size", 128, 1, 1 << 20);
  c.optimizer = f.get_choice("optimizer", "sgd", {"sgd", "adam", "adamw"});
  c.lr = f.get_double("lr", c.optimizer == "sgd" ? 0.05 : 1e-3, 0.0, 100.0);
  c.schedule = f.get_choice("schedule", "cosine", {"cosine", "constant"});
  c.seed = f.get_int("seed", 0, 0, INT64_MAX);
  c.threads = static_cast<int>(f.get_int("threads", 0, 0, 1024));
  std::string dev = f.get("device", "");
  try {
    c.device = dev.empty() ? best_device() : Device(dev);
  } catch (const Error& e) {
    throw UsageError(fmt::format("--device: {}", e.what()));
  }
  if (c.device.is_cuda() && c.device.index >= device_count(DeviceType::CUDA))
    throw UsageError(fmt::format("--device {}: only {} CUDA device(s) present", dev, device_count(DeviceType::CUDA)));
  c.data_dir = f.get("data-dir", "/usr/share/datasets/fashion-mnist");
  c.save = f.get("save", "");
  c.resume = f.get("resume", "");
  c.limit_train = f.get_int("limit-train", 0, 0, INT64_MAX);
  c.stop_after_epochs = f.get_int("stop-after-epochs", 0, 0, 1000);
  c.log_every = f.get_int("log-every", 100, 1, INT64_MAX);
  c.workers = static_cast<int>(f.get_int("workers", 0, 0, 64));
  c.amp = f.get_choice("amp", "none", {"none", "f16", "bf16"});
  c.amp_mode = f.get_choice("amp-mode", "o1", {"o1", "o2"});
  if (c.amp == "none" && c.amp_mode == "o2")
    throw UsageError("--amp-mode o2 needs --amp f16 or --amp bf16 (the model is converted to that dtype)");
  c.ddp = f.has("ddp");
  set_float32_matmul_precision(f.get_choice("matmul-precision", "highest", {"highest", "high"}));
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  examples::TrainConfig config;
  try {
    config = parse(argc, argv);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "mnist: %s\n%s", e.what(), kUsage);
    return 2;
  }
  try {
    examples::TrainResult r = examples::train(config, std::cout);
    if (r.rank == 0) std::cout << examples::result_json(config, r) << std::endl;
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "mnist: %s\n", e.what());
    return 1;
  }
}
