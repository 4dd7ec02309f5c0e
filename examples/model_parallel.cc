// Model parallel in one process: the main job's CNN split over two devices (convolutions on the
// first, fully connected layers on the second), trained for a few steps on Fashion-MNIST.
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
#include "train/run_monitor.h"
#include "train/train_parts.h"
#include "train/checkpoint.h"
#include "profiler/memory.h"

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
    // The whole CNN stays reachable (its layers are the split model's), so it is what is saved.
    auto cnn = models::make_cnn();
    train::SplitModel model(*cnn, train::kCnnSplit, dev.first, dev.second);
    auto opt = train::make_optimizer(c, model.parameters());
    data::DataLoader loader(sets.train,
                            {.batch_size = c.batch_size, .shuffle = true, .seed = static_cast<uint64_t>(c.seed)});
    train::TrainingState state;
    if (!c.resume.empty()) {
      state = train::load_checkpoint(c.resume, *cnn, opt.get());
      std::cout << fmt::format("resumed from {} at epoch {} batch {} (step {})\n", c.resume, state.epoch, state.batch,
                               state.step);
    }
    auto save = [&](int64_t epoch, int64_t batch) {
      state.epoch = epoch;
      state.batch = batch;
      state.rng = default_generator().state();
      train::save_checkpoint(c.save, *cnn, opt.get(), state);
    };
    train::StepCheckpoints checkpoints(c, nullptr);  // --save-every and SIGTERM/SIGINT
    const double flops = train::forward_flops([&] { model.forward(sets.train->get_batch({0}).data); });
    train::RunMonitor monitor(train::monitor_config(c), 0, flops, dev.first.is_cuda() || dev.second.is_cuda(),
                                 std::cout);
    profiler::reset_peak(dev.second.type);
    double loss = 0;
    int64_t& step = state.step;
    loader.set_epoch(state.epoch);
    loader.set_start_batch(state.batch);
    bool preempted = false;
    while (step < steps && !preempted) {
      const int64_t epoch = loader.epoch();
      int64_t batch_no = loader.start_batch();
      monitor.step_begin();
      for (data::Example& b : loader) {
        if (step == steps) break;
        monitor.data_ready();
        // The images go to the first device, the labels to the second, where the logits are.
        Tensor l;
        {
          profiler::RecordFunction range("forward");
          l = nn::functional::cross_entropy(model.forward(b.data), b.target.to(dev.second));
        }
        monitor.mark(train::Phase::kForward);
        {
          profiler::RecordFunction range("backward");
          opt->zero_grad();
          l.backward();  // the gradient crosses back from the second device to the first
        }
        monitor.mark(train::Phase::kBackward);
        const double gnorm = monitor.logs_this_step() ? train::grad_norm(model.parameters()) : -1;
        {
          profiler::RecordFunction range("optimizer");
          opt->step();
        }
        monitor.mark(train::Phase::kOptimizer);
        loss = l.item<double>();
        ++batch_no;
        if (++step % c.log_every == 0)
          std::cout << fmt::format("step {}/{} loss {:.4f}\n", step, steps, loss) << std::flush;
        monitor.step_end(b.target.size(0), loss, c.lr, gnorm, 1.0);
        const train::StepCheckpoints::Action act = checkpoints.after_step(step, step);
        if (act.save || (step == steps && !c.save.empty())) save(epoch, batch_no);
        if ((preempted = act.stop)) {
          std::cout << "preempted: stopped after step " << step << "\n";
          break;
        }
      }
    }
    const nlohmann::ordered_json line = {{"model", "cnn"}, {"first", dev.first.str()},   {"second", dev.second.str()},
                                         {"steps", steps}, {"batch_size", c.batch_size}, {"loss", loss},
                                         {"peak_memory_bytes", profiler::memory_counters(dev.second.type).peak}};
    std::cout << line.dump() << std::endl;
    return preempted ? dist::kExitPreempted : 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "model_parallel: %s\n", e.what());
    return 1;
  }
}
