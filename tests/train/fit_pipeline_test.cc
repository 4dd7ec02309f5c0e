// train::Trainer with Pipeline on real ranks (127.0.0.1, Gloo) and with ModelParallel in one
// process: 2 stages (GPipe, accumulation, clipping, shuffled data) and 2 stages x 2 replicas
// (1F1B, hybrid with DDP) end within 1e-5 of one process on the same batches, with the same step
// and validation losses on every rank; a run stopped mid-epoch resumes to the uninterrupted run's
// stage files byte for byte; ModelParallel over cpu + cpu trains bit for bit as one device; bad
// strategies (batch or last batch not splitting into micro-batches, a world the stages do not
// divide, a stage without parameters, a model that is not a Sequential) are refused by name.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "core/ops.h"
#include "distributed/pipeline/pipeline.h"
#include "tests/distributed/multiprocess.h"
#include "tests/train/fit_helpers.h"
#include "train/checkpoint.h"
#include "train/pipeline_checkpoint.h"

using namespace kiln;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kBatch = 32;  // per step, all replicas together

struct Run {
  train::Strategy strategy;
  int replicas = 1;
  int64_t grad_accum = 1;
  bool shuffle = false;
  int64_t stop_step = 0;  // StopAt this global step (0: run to the end)
};

train::FitOptions fit_options(const Run& run, const std::string& ckpt, std::ostream* log) {
  return {.epochs = 2, .lr = 0.05, .grad_accum = run.grad_accum, .clip_grad_norm = 0.5, .log_every = 5, .log = log,
          .checkpoint = ckpt, .strategy = run.strategy};
}

/// Writes `values` to `path`, one per line, at full precision.
void write_values(const std::string& path, const std::vector<double>& values) {
  std::ofstream f(path);
  for (double v : values) f << fmt::format("{:.17g}\n", v);
}

std::vector<double> read_values(const std::string& path) {
  std::ifstream f(path);
  std::vector<double> v;
  for (double x; f >> x;) v.push_back(x);
  return v;
}

/// The parameters of layers [lo, hi) of the small MLP loaded from `ckpt`, in order.
std::vector<Tensor> reference_stage(const std::string& ckpt, int stage, int stages) {
  auto ref = test::small_mlp();
  train::load_checkpoint(ckpt, *ref, nullptr, nullptr);
  auto& seq = dynamic_cast<nn::Sequential&>(*ref);
  std::vector<int64_t> counts;
  for (size_t i = 0; i < seq.size(); ++i) {
    int64_t n = 0;
    for (const Tensor& p : seq[i]->parameters()) n += p.numel();
    counts.push_back(n);
  }
  const std::vector<int> cut = dist::balanced_boundaries(counts, stages);
  std::vector<Tensor> params;
  for (int i = cut[static_cast<size_t>(stage)]; i < cut[static_cast<size_t>(stage) + 1]; ++i)
    for (const Tensor& p : seq[static_cast<size_t>(i)]->parameters()) params.push_back(p);
  return params;
}

/// Trains the small MLP for 2 epochs (batches of 32 in all) on `world` ranks; rank 0 writes its
/// step losses to ckpt + ".losses", its validation loss to ckpt + ".val" and its log to ckpt + ".log".
/// With `ref` (a one-process run's checkpoint), each rank of a 2-stage pipeline must hold the
/// reference's layers of its stage within 1e-5.
void train_ranks(int world, const fs::path& data, const std::string& ckpt, const Run& run, const std::string& name,
                 const std::string& ref = "") {
  test::require_all_ok(test::run_ranks(world, [&](int rank, int) {
    std::ostringstream log;
    data::DataLoader loader(test::synthetic_set(data, true),
                            {.batch_size = kBatch / run.replicas, .shuffle = run.shuffle, .seed = 5});
    data::DataLoader val(test::synthetic_set(data, false), {.batch_size = 50});
    train::Trainer trainer(test::small_mlp(), fit_options(run, ckpt, &log));
    if (run.stop_step > 0) trainer.add_callback(std::make_shared<test::StopAt>(run.stop_step));
    train::FitResult r = trainer.fit(loader, &val);
    const int64_t want = run.stop_step > 0 ? run.stop_step : 2 * 640 / kBatch / run.grad_accum;
    test::expect(r.world_size == world && r.rank == rank && r.steps == want, "rank {}: world {}, step {} (want {})",
                 rank, r.world_size, r.steps, want);
    if (rank == 0) {
      write_values(ckpt + ".losses", r.step_losses);
      if (r.val_loss) write_values(ckpt + ".val", {*r.val_loss});
      std::ofstream(ckpt + ".log") << log.str();
    } else {
      test::expect(log.str().empty(), "rank {} logged: {}", rank, log.str());
    }
    if (ref.empty()) return;
    const int stage = rank % 2;
    std::vector<Tensor> mine = trainer.model().parameters(), theirs = reference_stage(ref, stage, 2);
    test::expect(mine.size() == theirs.size() && !mine.empty(), "rank {}: {} parameters, reference stage {}", rank,
                 mine.size(), theirs.size());
    for (size_t i = 0; i < mine.size(); ++i) {
      const double d = (mine[i] - theirs[i]).abs().max().item<double>();
      test::expect(d <= 1e-5, "rank {} (stage {}) parameter {}: differs from one process by {}", rank, stage, i, d);
    }
  }, 240, name));
}

/// The step and validation losses of two runs' rank 0 match within `tol` relative.
void expect_same_losses(const std::string& a_ckpt, const std::string& b_ckpt, double tol) {
  const std::vector<double> a = read_values(a_ckpt + ".losses"), b = read_values(b_ckpt + ".losses");
  REQUIRE(a.size() == b.size());
  REQUIRE(!a.empty());
  for (size_t i = 0; i < a.size(); ++i)
    CHECK_MESSAGE(std::abs(a[i] - b[i]) <= tol * std::abs(b[i]), "step " << i + 1 << ": " << a[i] << " vs " << b[i]);
  const std::vector<double> va = read_values(a_ckpt + ".val"), vb = read_values(b_ckpt + ".val");
  REQUIRE(va.size() == 1);
  REQUIRE(vb.size() == 1);
  CHECK(std::abs(va[0] - vb[0]) <= tol * vb[0]);
}

/// Runs `body` on `world` ranks, each of which must throw a kiln::Error containing `want`.
void expect_refused(int world, const std::function<void()>& body, const std::string& want, const std::string& name) {
  test::require_all_ok(test::run_ranks(world, [&](int rank, int) {
    try {
      body();
    } catch (const Error& e) {
      test::expect(std::string(e.what()).find(want) != std::string::npos, "rank {}: '{}' does not say '{}'", rank,
                   e.what(), want);
      return;
    }
    test::expect(false, "rank {}: no error (want '{}')", rank, want);
  }, 120, name));
}

}  // namespace

TEST_CASE("Pipeline through the Trainer: 2 stages and 2 stages x 2 replicas end with one process's weights") {
  const fs::path data = test::make_data_dir();
  const std::string dir = test::scratch_dir("fit_pipeline");
  // 2 stages, GPipe, 4 micro-batches of 8, 2 batches per step, clipping, shuffled data.
  const Run accum{.strategy = train::SingleProcess{}, .grad_accum = 2, .shuffle = true};
  train_ranks(1, data, dir + "/one_accum.safetensors", accum, "fit_pipe_one_accum");
  Run pipe = accum;
  pipe.strategy = train::Pipeline{.stages = 2, .micro_batches = 4, .schedule = train::PipelineSchedule::gpipe};
  train_ranks(2, data, dir + "/pipe.safetensors", pipe, "fit_pipe_two", dir + "/one_accum.safetensors");
  expect_same_losses(dir + "/pipe.safetensors", dir + "/one_accum.safetensors", 1e-5);
  const std::string log = test::file_bytes(dir + "/pipe.safetensors.log");
  CHECK(log.find("pipeline: 2 stages (gloo), 4 micro-batches, gpipe, layers split at [0, 2, 4] (by params)") !=
        std::string::npos);
  CHECK(log.find("epoch 2/2 done: train_loss") != std::string::npos);

  // Hybrid: 2 stages x 2 replicas, 1F1B, each replica 16 of the step's 32 images.
  const Run plain{.strategy = train::SingleProcess{}};
  train_ranks(1, data, dir + "/one.safetensors", plain, "fit_pipe_one");
  const Run hybrid{.strategy = train::Pipeline{.stages = 2, .micro_batches = 2, .data_parallel = true},
                   .replicas = 2};
  train_ranks(4, data, dir + "/hybrid.safetensors", hybrid, "fit_pipe_hybrid", dir + "/one.safetensors");
  expect_same_losses(dir + "/hybrid.safetensors", dir + "/one.safetensors", 1e-5);
  CHECK(test::file_bytes(dir + "/hybrid.safetensors.log").find(", 2 data-parallel replicas") != std::string::npos);
}

TEST_CASE("a Pipeline run stopped mid-epoch resumes to the uninterrupted run's stage files") {
  const fs::path data = test::make_data_dir();
  const std::string dir = test::scratch_dir("fit_pipeline_resume");
  Run run{.strategy = train::Pipeline{.stages = 2, .micro_batches = 2}, .grad_accum = 2, .shuffle = true};
  train_ranks(2, data, dir + "/full.safetensors", run, "fit_pipe_full");
  run.stop_step = 7;  // of 10 in epoch 0
  train_ranks(2, data, dir + "/part.safetensors", run, "fit_pipe_part");
  run.stop_step = 0;
  train_ranks(2, data, dir + "/part.safetensors", run, "fit_pipe_rest");
  CHECK(test::file_bytes(dir + "/part.safetensors.log")
            .find("resumed from " + dir + "/part.safetensors at epoch 0 batch 14 (step 7)") != std::string::npos);
  for (int s = 0; s < 2; ++s) {
    const std::string full = dist::stage_checkpoint_path(dir + "/full.safetensors", s, 2);
    const std::string part = dist::stage_checkpoint_path(dir + "/part.safetensors", s, 2);
    CHECK_MESSAGE(test::file_bytes(full) == test::file_bytes(part), "stage " << s << " differs after the resume");
  }
  // The resumed run's 13 step losses are the uninterrupted run's last 13.
  const std::vector<double> whole = read_values(dir + "/full.safetensors.losses");
  const std::vector<double> rest = read_values(dir + "/part.safetensors.losses");
  REQUIRE(whole.size() == 20);
  REQUIRE(rest.size() == 13);
  for (size_t i = 0; i < rest.size(); ++i) CHECK(rest[i] == whole[i + 7]);
}

TEST_CASE("ModelParallel over cpu + cpu trains exactly as one device, under the model's own names") {
  const fs::path data = test::make_data_dir();
  const std::string dir = test::scratch_dir("fit_model_parallel");
  const Run one{.strategy = train::SingleProcess{}, .grad_accum = 2, .shuffle = true};
  train_ranks(1, data, dir + "/one.safetensors", one, "fit_mp_one");
  const Run parts{.strategy = train::ModelParallel{.devices = {kCPU, kCPU}}, .grad_accum = 2, .shuffle = true};
  train_ranks(1, data, dir + "/parts.safetensors", parts, "fit_mp_parts");
  CHECK(test::file_bytes(dir + "/one.safetensors") == test::file_bytes(dir + "/parts.safetensors"));
  CHECK(read_values(dir + "/one.safetensors.losses") == read_values(dir + "/parts.safetensors.losses"));
}

TEST_CASE("bad Pipeline and ModelParallel strategies are refused, naming the problem") {
  const fs::path data = test::make_data_dir();
  auto fit = [data](int64_t batch, train::Strategy s) {
    data::DataLoader loader(test::synthetic_set(data, true), {.batch_size = batch});
    train::Trainer trainer(test::small_mlp(), {.log = nullptr, .strategy = s});
    trainer.fit(loader);
  };
  expect_refused(2, [&] { fit(30, train::Pipeline{.stages = 2, .micro_batches = 4}); },
                 "the training loader's batch size 30 does not split into 4 micro-batches", "fit_pipe_batch");
  // 640 images in batches of 48: the last batch of 16 does not split into 3.
  expect_refused(2, [&] { fit(48, train::Pipeline{.stages = 2, .micro_batches = 3}); },
                 "each epoch's last batch of 16 samples does not split into 3 micro-batches", "fit_pipe_last");
  expect_refused(3, [&] { fit(32, train::Pipeline{.stages = 2}); },
                 "Pipeline: 2 stages, 3 ranks; start exactly 2 (one per stage)", "fit_pipe_world");
  expect_refused(3, [&] { fit(32, train::Pipeline{.stages = 2, .data_parallel = true}); },
                 "with data_parallel the world must be a multiple of 2", "fit_pipe_world_dp");
  // Flatten | Linear | ReLU | Linear in 4 virtual stages: rank 0 holds Flatten and ReLU.
  expect_refused(2, [&] {
    fit(32, train::Pipeline{.stages = 2, .micro_batches = 2, .schedule = train::PipelineSchedule::interleaved,
                            .virtual_stages = 2});
  }, "stage 0's layers hold no parameters (split at [0, 1, 2, 3, 4])", "fit_pipe_empty_stage");

  // Not a Sequential: refused before any rank joins, naming the type.
  struct Residual : nn::Module {
    Residual() : Module("Residual") { fc = register_module("fc", nn::Linear(4, 4)); }
    Tensor forward(const Tensor& x) override { return x + fc(x); }
    nn::ModulePtr<> fc;
  };
  expect_refused(1, [] { train::Trainer(std::make_shared<Residual>(), {.strategy = train::Pipeline{}}); },
                 "Trainer: Pipeline splits an nn::Sequential into stages; the model is a Residual", "fit_pipe_type");
  expect_refused(1, [] {
    train::Trainer(std::make_shared<Residual>(), {.strategy = train::ModelParallel{.devices = {kCPU, kCPU}}});
  }, "Trainer: ModelParallel splits an nn::Sequential over devices; the model is a Residual", "fit_mp_type");
  expect_refused(1, [] { train::Trainer(test::small_mlp(), {.strategy = train::ModelParallel{.devices = {kCPU}}}); },
                 "Trainer: ModelParallel needs at least 2 devices, got 1", "fit_mp_devices");
  expect_refused(1, [] {
    train::Trainer(test::small_mlp(),
                   {.strategy = train::ModelParallel{.devices = {kCPU, kCPU}, .boundaries = {0, 4, 4}}});
  }, "leave part 1 (on cpu) without layers", "fit_mp_boundaries");
}
