// The main job's flags (see mnist_flags.h).
#include "examples/mnist_flags.h"

#include "core/matmul_precision.h"
#include "core/util/cli.h"
#include "models/build_model.h"
#include "models/mlp_cnn.h"
#include "examples/pipeline_flags.h"

namespace kiln::examples {
namespace {

/// A flag whose value is one of `table`'s names, stored in `dest` as its enum value (through
/// train::value_of, as the pipeline's schedule and balance names are).
template <class E>
CLI::Option* add_choice(CLI::App& app, const std::string& flag, E& dest, const train::NameTable<E>& table,
                        const std::string& help) {
  std::vector<std::string> names;
  for (const auto& entry : table) names.push_back(entry.first);
  return app
      .add_option_function<std::string>(
          flag, [&dest, &table, flag](const std::string& name) { dest = train::value_of(table, name, flag.c_str()); },
          help)
      ->check(cli::one_of(std::move(names)));
}

}  // namespace

int MnistFlags::parse(int argc, const char* const* argv, const std::string& name, const std::string& description,
                      const std::string& footer) {
  cli::App app(description, name);
  app.footer(footer);
  declare(app);
  if (int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  if (std::string problem = finish(); !problem.empty()) return cli::usage_error(app, problem);
  return -1;
}

void MnistFlags::declare(CLI::App& app) {
  app.add_option("--model", c.model, "model to train (resnet18: ResNet-18 on the images padded to 32x32)")
      ->check(cli::one_of({"mlp", "cnn", "resnet18"}));
  width = app.add_option("--width", c.width, "resnet18: channels of layer1, doubled at each stage (torchvision: 64)")
              ->check(cli::range<int64_t>(1, 4096));
  app.add_option("--epochs", c.epochs, "epochs to train")->check(cli::range<int64_t>(1, 1000));
  app.add_option("--batch-size", c.batch_size, "batch size")->check(cli::range<int64_t>(1, 1 << 20));
  lr = app.add_option("--lr", c.lr, fmt::format("learning rate (default {} for sgd, 1e-3 for adam/adamw)", sgd_lr))
           ->check(cli::range(0.0, 100.0));
  add_choice(app, "--optimizer", c.optimizer, train::kOptimizerNames, "optimizer (sgd: with momentum 0.9)");
  add_choice(app, "--schedule", c.schedule, train::kScheduleNames,
             "learning-rate schedule over the run (cosine: per step)");
  app.add_option("--seed", c.seed, "seed for init and data order")->check(cli::range<int64_t>(0, INT64_MAX));
  app.add_option("--threads", c.threads, "CPU threads (0: all cores)")->check(cli::range(0, 1024));
  app.add_option("--device", device, "cpu|cuda|cuda:N (default: the best present)")
      ->check(cli::accepted_by([](const std::string& s) { (void)Device(s); }));
  app.add_option("--data-dir", c.data_dir, "Fashion-MNIST/MNIST IDX files");
  app.add_option("--save", c.save, "checkpoint after every epoch (safetensors)");
  app.add_option("--resume", c.resume, "continue the run saved in this file");
  app.add_option("--stop-after-epochs", c.stop_after_epochs,
                 "stop after N epochs of this invocation (resume later with --resume; 0: never)")
      ->check(cli::range<int64_t>(0, 1000));
  app.add_option("--save-every", c.save_every,
                 "also checkpoint to --save every N steps, mid-epoch included (0: only after each epoch)")
      ->check(cli::range<int64_t>(0, INT64_MAX));
  app.add_flag("--auto-resume", c.auto_resume,
               "resume from --save when it exists (restarted jobs, e.g. under launch --max-restarts)");
  app.add_option("--stop-after-steps", c.stop_after_steps,
                 "stop after N steps of this invocation, saving first (resume later with --resume; 0: never)")
      ->check(cli::range<int64_t>(0, INT64_MAX));
  app.add_option("--timeout", c.timeout_s,
                 "seconds a collective (or the rendezvous) may wait for the other ranks before failing")
      ->check(cli::range(0.1, 1e7));
  app.add_option("--dropout", c.dropout, "dropout probability after each hidden layer of the MLP")
      ->check(cli::range(0.0, 0.99));
  app.add_option("--limit-train", c.limit_train, "use only the first N training images (0: all)")
      ->check(cli::range<int64_t>(0, INT64_MAX));
  app.add_option("--log-every", c.log_every, "steps between progress lines")
      ->check(cli::range<int64_t>(1, INT64_MAX));
  app.add_option("--workers", c.workers, "data loader worker threads (0: batches gathered inline)")
      ->check(cli::range(0, 64));
  add_choice(app, "--amp", c.amp, train::kAmpNames, "mixed precision");
  add_choice(app, "--amp-mode", c.amp_mode, train::kAmpModeNames,
             "o1: f32 model under autocast; o2: the model in f16/bf16");
  app.add_option("--matmul-precision", matmul_precision, "f32 GEMMs on GPUs: highest (full f32) or high (TF32)")
      ->check(cli::one_of({"highest", "high"}));
  app.add_flag("--ddp", c.ddp, "data parallel across the ranks started by //distributed/launch, srun or mpirun");
  app.add_option("--zero", c.zero, "ZeRO stage with --ddp: 1 shards the optimizer state over the ranks")
      ->check(cli::range(0, 1));
  add_choice(app, "--zero-checkpoint", c.zero_checkpoint, train::kZeroCheckpointNames,
             "with --zero 1: consolidated (resumable by any run) or sharded (a file per rank, same world size)");
  app.add_option("--pipeline-stages", c.pipeline_stages,
                 "pipeline parallel: the model split into P stages, one per rank (1: no pipeline)")
      ->check(cli::range(1, 64));
  micro_batches = app.add_option("--micro-batches", c.micro_batches,
                                 "pipeline: micro-batches per batch (--batch-size must divide by it)")
                      ->check(cli::range(1, 4096));
  // --schedule already names the learning-rate schedule.
  const PipelineScheduleOptions schedule_options =
      add_pipeline_schedule_options(app, "--pipeline-schedule", c.pipeline_schedule, c.virtual_stages);
  pipeline_schedule = schedule_options.schedule;
  virtual_stages = schedule_options.virtual_stages;
  pipeline_balance = app.add_option("--pipeline-balance", c.pipeline_balance,
                                    "pipeline: cut the stages to equal parameter counts or equal measured forward time")
                         ->check(cli::one_of({"params", "time"}));
  app.add_option("--profile", c.profile_dir, "profile a few steps: Chrome trace per rank in DIR, op table printed");
  app.add_option("--profile-steps", profile_steps, "profiler schedule: wait,warmup,active steps")
      ->expected(3)
      ->delimiter(',')
      ->check(cli::range<int64_t>(0, 1 << 30));
  app.add_option("--logdir", c.logdir, "TensorBoard event files in DIR (loss, lr, grad norm, loss scale, "
                                       "samples/s, test accuracy)");
  app.add_flag("--cuda-graph", c.cuda_graph,
               "capture one training step as a CUDA graph and replay it (CUDA, sgd, --schedule constant, no "
               "--dropout/--ddp/--pipeline-stages/--amp f16)");
  app.add_option("--peak-gflops", c.peak_gflops,
                 "peak GFLOP/s for MFU (default: measured f32 GEMM rate on CPU; required for MFU on GPUs)")
      ->check(cli::range(0.0, 1e9));
}

std::string MnistFlags::finish() {
  if (lr->count() == 0) c.lr = c.optimizer == train::Optimizer::sgd ? sgd_lr : 1e-3;
  c.device = device.empty() ? best_device() : Device(device);
  if (c.device.is_cuda() && c.device.index >= device_count(DeviceType::CUDA))
    return fmt::format("--device {}: only {} CUDA device(s) present", device, device_count(DeviceType::CUDA));
  if (c.auto_resume && c.save.empty()) return "--auto-resume needs --save (the checkpoint to resume from)";
  if (c.save_every > 0 && c.save.empty()) return "--save-every needs --save (where to write)";
  if (c.dropout > 0 && c.model != "mlp") return "--dropout applies to --model mlp only";
  if (width->count() > 0 && c.model != "resnet18") return "--width applies to --model resnet18 only";
  if (c.amp == train::Precision::f32 && c.amp_mode == train::AmpMode::o2)
    return "--amp-mode o2 needs --amp f16 or --amp bf16 (the model is converted to that dtype)";
  if (std::string problem = check_pipeline(); !problem.empty()) return problem;
  if (std::string problem = train::cuda_graph_problem(c); !problem.empty()) return problem;
  if (profile_steps[2] < 1) return "--profile-steps: the active count must be at least 1";
  c.profile_wait = profile_steps[0];
  c.profile_warmup = profile_steps[1];
  c.profile_active = profile_steps[2];
  set_float32_matmul_precision(matmul_precision);
  return {};
}

std::string MnistFlags::check_pipeline() const {
  const int p = c.pipeline_stages, m = c.micro_batches;
  if (p == 1)
    for (CLI::Option* o : {micro_batches, pipeline_schedule, pipeline_balance, virtual_stages})
      if (o->count() > 0) return fmt::format("{} needs --pipeline-stages 2 or more", o->get_name());
  if (p == 1) return {};
  if (!models::is_sequential_model(c.model))
    return fmt::format("--pipeline-stages splits a Sequential model (mlp, cnn) into stages; --model {} is not one",
                       c.model);
  const int64_t layers = static_cast<int64_t>(models::make_model(c.model)->size());
  if (std::string problem = pipeline_split_problem(c.pipeline_schedule, p, m, c.virtual_stages, layers, c.model);
      !problem.empty())
    return problem;
  if (c.batch_size % m != 0)
    return fmt::format("--batch-size {} does not split into --micro-batches {} (make it a multiple)", c.batch_size,
                       m);
  return {};
}

}  // namespace kiln::examples
