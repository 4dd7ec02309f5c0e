// train::Trainer under DataParallel on 2 real ranks (127.0.0.1, Gloo): with two accumulated
// micro-batches, gradient clipping and SGD with momentum, DDP and ZeRO-1 end with the weights one process
// reaches on the concatenated batches (within 1e-5), report the same validation loss, and a
// DDP run stopped mid-epoch resumes to the same weights; early stopping stops every rank together.
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>

#include "core/ops.h"
#include "tests/distributed/multiprocess.h"
#include "tests/train/fit_helpers.h"
#include "train/callbacks.h"
#include "train/checkpoint.h"

using namespace kiln;
namespace fs = std::filesystem;

namespace {

/// Trains the small MLP for 2 epochs on `world` ranks (batch 32 in all: 32 / world per rank),
/// writing the checkpoint to `ckpt` and rank 0's validation loss to `ckpt + ".val"`.
void train_ranks(int world, const fs::path& data, const std::string& ckpt, train::Strategy strategy,
                 int64_t stop_step, const std::string& name) {
  test::require_all_ok(test::run_ranks(world, [&](int rank, int) {
    auto model = test::small_mlp();
    data::DataLoader loader(test::synthetic_set(data, true), {.batch_size = 32 / world});
    data::DataLoader val(test::synthetic_set(data, false), {.batch_size = 50});
    train::Trainer trainer(model, {.epochs = 2, .lr = 0.05, .grad_accum = 2,
                                   .clip_grad_norm = 0.5, .log_every = 0, .log = nullptr, .checkpoint = ckpt,
                                   .strategy = strategy});
    if (stop_step > 0) trainer.add_callback(std::make_shared<test::StopAt>(stop_step));
    train::FitResult r = trainer.fit(loader, &val);
    const int64_t want = stop_step > 0 ? stop_step : 20;  // 640 images / 32 per step / 2 micro-batches x 2 epochs
    test::expect(r.world_size == world && r.rank == rank && r.steps == want, "rank {}: world {}, step {} (want {})",
                 rank, r.world_size, r.steps, want);
    if (rank == 0 && r.val_loss) std::ofstream(ckpt + ".val") << fmt::format("{:.17g}", *r.val_loss);
  }, 240, name));
}

/// The largest weight difference between two checkpoints (b empty: the initial model), computed
/// in a child (this process forks the ranks and starts no threads of its own).
double weight_diff(const std::string& a, const std::string& b) {
  const std::string out = test::scratch_dir("fit_ddp_diff") + "/diff";
  test::require_all_ok(test::run_ranks(1, [&](int, int) {
    auto ma = test::small_mlp(), mb = test::small_mlp();
    train::load_checkpoint(a, *ma, nullptr, nullptr);
    if (!b.empty()) train::load_checkpoint(b, *mb, nullptr, nullptr);
    std::ofstream(out) << fmt::format("{:.17g}", test::max_param_diff(*ma, *mb));
  }, 60, "fit_ddp_diff"));
  std::ifstream in(out);
  double d = -1;
  in >> d;
  return d;
}

double read_double(const std::string& path) {
  std::ifstream in(path);
  double v = -1;
  in >> v;
  return v;
}

}  // namespace

TEST_CASE("DDP and ZeRO-1 through the Trainer end with one process's weights") {
  const fs::path data = test::make_data_dir();
  const std::string dir = test::scratch_dir("fit_ddp_checkpoints");
  const std::string one = dir + "/one.safetensors", ddp = dir + "/ddp.safetensors", zero = dir + "/zero.safetensors";
  train_ranks(1, data, one, train::SingleProcess{}, 0, "fit_one");
  train_ranks(2, data, ddp, train::DataParallel{}, 0, "fit_ddp");
  train_ranks(2, data, zero, train::DataParallel{.zero_stage = 1}, 0, "fit_zero");
  CHECK(weight_diff(one, "") > 1e-2);  // it trained
  CHECK(weight_diff(one, ddp) < 1e-5);
  CHECK(weight_diff(one, zero) < 1e-5);
  CHECK(read_double(ddp + ".val") == doctest::Approx(read_double(one + ".val")).epsilon(1e-5));
  CHECK(read_double(zero + ".val") == doctest::Approx(read_double(one + ".val")).epsilon(1e-5));

  // Stopped after step 7 (mid-epoch, checkpoint written) and resumed: the uninterrupted weights.
  const std::string part = dir + "/part.safetensors";
  train_ranks(2, data, part, train::DataParallel{}, 7, "fit_ddp_part");
  train_ranks(2, data, part, train::DataParallel{}, 0, "fit_ddp_rest");
  CHECK(weight_diff(ddp, part) == 0);
}

TEST_CASE("every rank sees the all-reduced epoch metrics, so early stopping stops them together") {
  // lr 0: the validation loss never improves after epoch 1; patience 1 stops both ranks after epoch 2.
  const fs::path data = test::make_data_dir();
  test::require_all_ok(test::run_ranks(2, [&](int rank, int) {
    data::DataLoader loader(test::synthetic_set(data, true), {.batch_size = 32, .shuffle = true, .seed = 3});
    data::DataLoader val(test::synthetic_set(data, false), {.batch_size = 50});
    train::Trainer trainer(test::small_mlp(), {.epochs = 5, .lr = 0, .log_every = 0, .log = nullptr,
                                               .strategy = train::DataParallel{}});
    trainer.add_callback(std::make_shared<train::EarlyStopping>(train::EarlyStoppingOptions{.patience = 1}));
    train::FitResult r = trainer.fit(loader, &val);
    test::expect(r.epochs_done == 2 && r.steps == 20 && r.stopped_early, "rank {}: {} epochs, {} steps", rank,
                 r.epochs_done, r.steps);
    test::expect(r.epochs.size() == 2 && r.epochs[0].val_loss == r.epochs[1].val_loss, "rank {}: val losses differ",
                 rank);
    // 640 images over 2 ranks at 32 per rank: 10 steps per epoch, 640 samples per epoch in all.
    test::expect(r.samples_per_sec > 0, "rank {}: no samples/s", rank);
  }, 120, "fit_ddp_early_stop"));
}
