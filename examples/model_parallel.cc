// Model parallel in one process: the main job's CNN split over two devices (convolutions on the
// first, fully connected layers on the second), trained for a few steps on Fashion-MNIST by
// train::Trainer with the ModelParallel strategy.
//   tools/bazel run //examples:model_parallel -- --steps 50 --save mp.safetensors --save-every 10
// SIGTERM/SIGINT: finishes the step, saves to --save and exits 75; --resume continues exactly.
#include "train/model_parallel.h"

#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "core/util/cli.h"
#include "core/parallel.h"
#include "data/dataloader.h"
#include "models/mlp_cnn.h"
#include "distributed/launch/exit_codes.h"
#include "profiler/memory.h"
#include "train/fit.h"
#include "train/run_monitor.h"
#include "train/train_parts.h"

using namespace kiln;

int main(int argc, char** argv) {
  cli::App app("Trains the main job's CNN split over two devices of one process (model parallel).", "model_parallel");
  train::TrainConfig c;
  c.model = "cnn";
  c.limit_train = 2048;
  int64_t steps = 30;
  app.add_option("--steps", steps, "training steps")->check(cli::range<int64_t>(1, 1000000));
  app.add_option("--batch-size", c.batch_size, "batch size")->check(cli::range<int64_t>(1, 1 << 20));
  app.add_option("--lr", c.lr, "SGD learning rate (momentum 0.9)")->check(cli::range(0.0, 100.0));
  app.add_option("--seed", c.seed, "seed for init and data order")->check(cli::range<int64_t>(0, INT64_MAX));
  app.add_option("--threads", c.threads, "CPU threads (0: all cores)")->check(cli::range(0, 1024));
  app.add_option("--data-dir", c.data_dir, "Fashion-MNIST/MNIST IDX files");
  app.add_option("--limit-train", c.limit_train, "use only the first N training images (0: all)")
      ->check(cli::range<int64_t>(0, INT64_MAX));
  app.add_option("--save", c.save, "checkpoint at the end (and every --save-every steps, and on SIGTERM/SIGINT)");
  app.add_option("--save-every", c.save_every, "also checkpoint every N steps (0: only at the end)")
      ->check(cli::range<int64_t>(0, INT64_MAX));
  app.add_option("--resume", c.resume, "continue the run saved in this file, up to --steps in all");
  std::vector<int64_t> profile_steps{5, 2, 5};
  c.log_every = 10;
  app.add_option("--profile", c.profile_dir, "profile a few steps: Chrome trace in DIR, op table printed");
  app.add_option("--profile-steps", profile_steps, "profiler schedule: wait,warmup,active steps")
      ->expected(3)
      ->delimiter(',')
      ->check(cli::range<int64_t>(0, 1 << 30));
  app.add_option("--logdir", c.logdir, "TensorBoard event files in DIR");
  app.add_option("--log-every", c.log_every, "steps between progress and breakdown lines")
      ->check(cli::range<int64_t>(1, INT64_MAX));
  app.add_option("--peak-gflops", c.peak_gflops, "peak GFLOP/s for MFU (default: measured on CPU)")
      ->check(cli::range(0.0, 1e9));
  if (int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  if (c.save_every > 0 && c.save.empty()) return cli::usage_error(app, "--save-every needs --save (where to write)");
  if (profile_steps[2] < 1) return cli::usage_error(app, "--profile-steps: the active count must be at least 1");
  c.profile_wait = profile_steps[0];
  c.profile_warmup = profile_steps[1];
  c.profile_active = profile_steps[2];
  try {
    profiler::track_memory();
    if (c.threads > 0) set_num_threads(c.threads);
    train::Datasets sets = train::load_datasets(c);
    train::DevicePair dev = train::model_parallel_devices();
    std::cout << "model parallel: " << dev.note << "\n";
    manual_seed(static_cast<uint64_t>(c.seed));
    // The convolutions on the first device, the fully connected layers on the second.
    train::Trainer trainer(models::make_cnn(),
                           {.epochs = 0, .max_steps = steps, .lr = c.lr, .log_every = c.log_every,
                            .checkpoint = c.save.empty() ? c.resume : c.save, .save_every = c.save_every,
                            .resume = !c.resume.empty(), .stop_after_steps = c.stop_after_steps,
                            .stop_after_epochs = c.stop_after_epochs, .handle_preemption = true,
                            .strategy = train::ModelParallel{.devices = {dev.first, dev.second},
                                                             .boundaries = {0, train::kCnnSplit, 10}}});
    data::DataLoader loader(sets.train,
                            {.batch_size = c.batch_size, .shuffle = true, .seed = static_cast<uint64_t>(c.seed)});
    trainer.model().eval();  // the FLOPs of one sample's forward, without touching any statistics
    const double flops = train::forward_flops([&] { trainer.model().forward(sets.train->get_batch({0}).data); });
    trainer.add_callback(std::make_shared<train::RunMonitor>(train::monitor_config(c), 0, flops,
                                                             dev.second.is_cuda(), std::cout));
    profiler::reset_peak(dev.second.type);
    const train::FitResult r = trainer.fit(loader);
    const nlohmann::ordered_json line = {
        {"model", "cnn"}, {"first", dev.first.str()}, {"second", dev.second.str()}, {"steps", r.steps},
        {"batch_size", c.batch_size}, {"loss", r.step_losses.empty() ? 0.0 : r.step_losses.back()},
        {"peak_memory_bytes", profiler::memory_counters(dev.second.type).peak}};
    std::cout << line.dump() << std::endl;
    return r.preempted ? dist::kExitPreempted : 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "model_parallel: %s\n", e.what());
    return 1;
  }
}
