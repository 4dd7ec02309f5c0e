#include "examples/trainer.h"

#include <chrono>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "core/parallel.h"
#include "data/dataloader.h"
#include "data/mnist.h"
#include "distributed/checkpoint.h"
#include "distributed/ddp.h"
#include "distributed/gloo_backend.h"
#include "distributed/init.h"
#include "examples/mixed_precision.h"
#include "examples/models.h"
#include "examples/pipeline_trainer.h"
#include "examples/train_parts.h"
#include "nn/checkpoint.h"
#include "optim/lr_scheduler.h"

namespace kiln::examples {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

/// Mean loss and accuracy over a dataset, in eval mode without recording. With a process
/// group, each rank evaluates its contiguous slice and the sums are all-reduced.
std::pair<double, double> evaluate(nn::Module& model, const std::shared_ptr<data::MnistDataset>& ds, Device device,
                                   dist::ProcessGroup* pg) {
  NoGradGuard g;
  model.eval();
  std::shared_ptr<data::Dataset> part = ds;
  if (pg != nullptr) {
    int64_t n = ds->size(), lo = n * pg->rank() / pg->size(), hi = n * (pg->rank() + 1) / pg->size();
    part = std::make_shared<data::TensorDataset>(ds->data().narrow(0, lo, hi - lo), ds->targets().narrow(0, lo, hi - lo));
  }
  data::DataLoader loader(part, {.batch_size = 1000, .shuffle = false});
  double loss_sum = 0;
  int64_t correct = 0, n = 0;
  for (data::Example& b : loader) {
    Tensor x = b.data.to(device), y = b.target.to(device);
    Tensor logits = model.forward(x);
    loss_sum += nn::functional::cross_entropy(logits, y, nn::functional::Reduction::sum).item<double>();
    correct += (logits.argmax(1) == y).sum().item<int64_t>();
    n += y.size(0);
  }
  model.train();
  if (pg != nullptr) {
    Tensor sums = tensor({loss_sum, static_cast<double>(correct), static_cast<double>(n)}, dtype(kFloat64));
    pg->allreduce(sums)->wait();
    auto v = sums.to_vector<double>();
    return {v[0] / v[2], v[1] / v[2]};
  }
  return {loss_sum / static_cast<double>(n), static_cast<double>(correct) / static_cast<double>(n)};
}

}  // namespace

TrainResult train(const TrainConfig& config, std::ostream& log) {
  TrainConfig c = config;
  if (c.pipeline_stages > 1) return train_pipeline(config, log);
  if (c.ddp) c.device = rank_device(c, "--ddp");
  if (c.threads > 0) set_num_threads(c.threads);
  Datasets sets = load_datasets(c);
  std::shared_ptr<data::Dataset> train_set = sets.train;
  auto test_set = sets.test;

  manual_seed(static_cast<uint64_t>(c.seed));
  auto model = make_model(c.model);
  model->to(c.device);
  MixedPrecision mp(c.amp, c.amp_mode);
  mp.prepare_model(*model);
  auto opt = make_optimizer(c, model->parameters());
  mp.prepare_optimizer(*opt);

  // Data parallel: join the job; only rank 0 speaks.
  std::shared_ptr<dist::ProcessGroup> pg;
  KILN_CHECK(!c.ddp || std::getenv("WORLD_SIZE") != nullptr,
             "--ddp: WORLD_SIZE is not set; start the ranks with `tools/bazel run //distributed:launch -- "
             "--nproc-per-node N -- <mnist binary> --ddp ...`");
  if (c.ddp)
    pg = dist::init_process_group({.backend = c.device.is_cuda() ? "nccl" : "gloo",
                                   .timeout = std::chrono::milliseconds(static_cast<int64_t>(c.dist_timeout_s * 1000))});
  const int rank = pg ? pg->rank() : 0, world = pg ? pg->size() : 1;
  std::ostream quiet(nullptr);
  std::ostream& out = rank == 0 ? log : quiet;

  nn::TrainingState state;
  if (!c.resume.empty()) {
    state = pg ? dist::load_checkpoint(*pg, c.resume, *model, opt.get())
               : nn::load_checkpoint(c.resume, *model, opt.get());
    mp.load(state);
    out << fmt::format("resumed from {} at epoch {} (step {})\n", c.resume, state.epoch, state.step);
  }
  // After loading, so every rank starts from rank 0's (identical) checkpoint.
  std::unique_ptr<dist::DistributedDataParallel> ddp;
  if (pg) {
    ddp = std::make_unique<dist::DistributedDataParallel>(model, pg);
    // Every rank must make the same skip-or-step decision. Under plain DDP it does without an
    // extra all-reduce of the scaler's flag: backward leaves identical averaged gradients on every
    // rank, so an inf anywhere is an inf everywhere (ddp_test checks it). Pipeline and hybrid runs,
    // whose stages hold different gradients, share the flag (pipeline_trainer.cc).
    out << fmt::format("data parallel: {} ranks ({}), {} gradient buckets, batch {} per rank\n", world,
                       pg->backend(), ddp->bucket_names().size(), c.batch_size);
    if (auto* gloo = dynamic_cast<dist::ProcessGroupGloo*>(pg.get())) out << "all-reduce: " << gloo->allreduce_path() << "\n";
  }
  // What the loop runs: the model, or the same model under data parallel (same names, same state).
  nn::Module& net = ddp ? static_cast<nn::Module&>(*ddp) : *model;

  data::DataLoaderOptions lo{.batch_size = c.batch_size, .shuffle = !pg, .drop_last = false,
                             .num_workers = c.workers, .seed = static_cast<uint64_t>(c.seed)};
  if (pg)
    lo.sampler = std::make_shared<data::DistributedSampler>(train_set->size(), rank, world, /*shuffle=*/true,
                                                            static_cast<uint64_t>(c.seed));
  data::DataLoader loader(train_set, lo);
  // The schedule is a closed form of the global step, so a resumed run continues it exactly.
  const int64_t total_steps = c.epochs * loader.size();
  optim::CosineAnnealingLR cosine(*opt, std::max<int64_t>(total_steps, 1));
  TrainResult r;
  const auto start = Clock::now();
  double train_seconds = 0;
  int64_t samples = 0;
  const int64_t last_epoch =
      c.stop_after_epochs > 0 ? std::min(c.epochs, state.epoch + c.stop_after_epochs) : c.epochs;
  for (int64_t epoch = state.epoch; epoch < last_epoch; ++epoch) {
    loader.set_epoch(epoch);
    EpochProgress progress(epoch, loader.size(), c.log_every, out);
    for (data::Example& batch : loader) {
      Tensor x = batch.data.to(c.device), y = batch.target.to(c.device);
      Tensor loss;
      {
        amp::AutocastGuard autocast = mp.autocast();
        loss = nn::functional::cross_entropy(net(x), y);
      }
      opt->zero_grad();
      mp.backward(loss);
      opt->set_lr(c.schedule == "cosine" ? cosine.lr_at(state.step, c.lr) : c.lr);
      mp.step(*opt);
      double l = loss.item<double>();
      r.step_losses.push_back(l);
      ++state.step;
      progress.step(y.size(0) * world, l);
    }
    train_seconds += progress.finish();
    samples += progress.samples();
    double epoch_loss = progress.mean_loss();
    if (pg) {
      Tensor l = tensor({epoch_loss}, dtype(kFloat64));
      pg->allreduce(l, dist::ReduceOp::kAvg)->wait();
      epoch_loss = l.item<double>();
    }
    r.epoch_train_loss.push_back(epoch_loss);
    // Evaluated as it trains: under autocast (an o2 model also needs its f32 inputs cast down).
    auto [test_loss, test_acc] = [&] {
      amp::AutocastGuard autocast = mp.autocast();
      return evaluate(*model, test_set, c.device, pg.get());
    }();
    r.test_loss = test_loss;
    r.test_accuracy = test_acc;
    ++r.epochs_done;
    progress.done(r.epoch_train_loss.back(), test_loss, test_acc);
    if (!c.save.empty()) {
      state.epoch = epoch + 1;
      state.rng = default_generator().state();
      mp.save(state);
      if (pg)
        dist::save_checkpoint(*pg, c.save, *model, opt.get(), state);  // rank 0 writes, the others wait
      else
        nn::save_checkpoint(c.save, *model, opt.get(), state);
    }
  }
  r.wall_seconds = seconds_since(start);
  r.samples_per_sec = train_seconds > 0 ? static_cast<double>(samples) / train_seconds : 0;
  r.skipped_steps = mp.skipped_steps();
  r.rank = rank;
  r.world_size = world;
  return r;
}

std::string result_json(const TrainConfig& c, const TrainResult& r) {
  nlohmann::ordered_json line = {
      {"model", c.model},
      {"device", c.device.str()},
      {"epochs", c.epochs},
      {"batch_size", c.batch_size},
      {"optimizer", c.optimizer},
      {"lr", c.lr},
      {"schedule", c.schedule},
      {"amp", MixedPrecision(c.amp, c.amp_mode).describe()},
      {"threads", get_num_threads()},
      {"world_size", r.world_size},
      {"train_loss", r.epoch_train_loss.empty() ? 0.0 : r.epoch_train_loss.back()},
      {"test_loss", r.test_loss},
      {"test_accuracy", r.test_accuracy},
      {"samples_per_sec", r.samples_per_sec},
      {"wall_seconds", r.wall_seconds},
      {"skipped_steps", r.skipped_steps},
  };
  if (c.pipeline_stages > 1) {
    line["pipeline_stages"] = c.pipeline_stages;
    line["micro_batches"] = c.micro_batches;
    line["pipeline_schedule"] = c.pipeline_schedule;
    line["dropped_batches"] = r.dropped_batches;
  }
  return line.dump();
}

}  // namespace kiln::examples
