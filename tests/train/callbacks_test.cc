// The Trainer's callbacks: EarlyStopping stops at the epoch its rule predicts, ReduceLROnPlateau
// follows PyTorch's rule (relative threshold, patience, min_lr, eps) on a fixed metric sequence,
// the EMA equals the hand-computed average and is what validation sees, and all three resume
// exactly from a checkpoint.
#include <doctest/doctest.h>

#include <cmath>
#include <sstream>

#include "core/ops.h"
#include "optim/sgd.h"
#include "tests/train/fit_helpers.h"
#include "train/callbacks.h"

using namespace kiln;
namespace fs = std::filesystem;
using train::FitOptions;
using train::Trainer;

TEST_CASE("EarlyStopping: an improvement must beat the best by min_delta; patience bad epochs stop") {
  train::EarlyStopping es({.patience = 2, .min_delta = 0.1});
  // 1.0 best; 0.95 is not below 0.9 (bad 1); 0.85 is (best); 0.86 bad 1; 0.80 not below 0.75: bad 2.
  std::vector<bool> stops;
  for (double v : {1.0, 0.95, 0.85, 0.86, 0.80}) stops.push_back(es.update(v));
  CHECK(stops == std::vector<bool>{false, false, false, false, true});
  CHECK(es.best() == 0.85);
  train::EarlyStopping acc({.monitor = train::Monitor::val_accuracy, .patience = 1});
  CHECK(!acc.update(0.5));
  CHECK(!acc.update(0.6));  // accuracy improves upwards
  CHECK(acc.update(0.6));
}

TEST_CASE("EarlyStopping stops fit at the predicted epoch on a plateau") {
  // lr 0: the validation loss is the same every epoch. Epoch 1 sets the best, epochs 2 and 3 are
  // the two bad epochs of patience 2: training stops after epoch 3 of 10.
  fs::path dir = test::make_data_dir();
  data::DataLoader loader(test::synthetic_set(dir, true), {.batch_size = 64});
  data::DataLoader val(test::synthetic_set(dir, false), {.batch_size = 100});
  FitOptions o = test::quiet(10);
  o.lr = 0;
  Trainer trainer(test::small_mlp(), o);
  auto es = std::make_shared<train::EarlyStopping>(train::EarlyStoppingOptions{.patience = 2});
  trainer.add_callback(es);
  train::FitResult r = trainer.fit(loader, &val);
  CHECK(r.epochs_done == 3);
  CHECK(r.steps == 30);
  CHECK(r.stopped_early);
  CHECK(es->wait_count() == 2);
  // Without a validation loader there is no val_loss to monitor.
  Trainer t2(test::small_mlp(), o);
  t2.add_callback(std::make_shared<train::EarlyStopping>());
  CHECK_THROWS_WITH_AS(t2.fit(loader), doctest::Contains("give fit() a validation loader"), Error);
}

TEST_CASE("ReduceLROnPlateau's learning rates follow PyTorch's rule on a fixed metric sequence") {
  // mode min, threshold 1e-4 relative, cooldown 0, factor 0.5, patience 1, min_lr 0.02; two
  // groups at lr 0.1 and 0.04. By the documented rule (better: metric < best * (1 - 1e-4); a
  // reduction when the bad epochs exceed the patience, then the count restarts; new lr =
  // max(lr * factor, min_lr), applied only when it moves by more than eps 1e-8):
  //  1.0 best | 0.9 best | 0.95 bad1 | 0.96 bad2 -> 0.05, 0.02 | 0.8 best | 0.79995 bad1 (not below
  //  0.8 * 0.9999 = 0.79992) | 0.79991 best (below it; an absolute 1e-4 would refuse it) | 0.81 bad1 |
  //  0.82 bad2 -> 0.025 (0.02 stays) | 0.83 bad1 | 0.84 bad2 -> max(0.0125, 0.02) = 0.02 | 0.85 bad1 |
  //  0.86 bad2 -> 0.02 (no change).
  Tensor p = ones({2}).set_requires_grad(true), q = ones({2}).set_requires_grad(true);
  optim::SGD opt({optim::ParamGroup({p}), optim::ParamGroup({q}, {{"lr", 0.04}})}, optim::SGDOptions(0.1));
  train::ReduceLROnPlateau plateau({.factor = 0.5, .patience = 1, .min_lr = 0.02});
  const std::vector<double> metrics = {1.0, 0.9, 0.95, 0.96, 0.8, 0.79995, 0.79991, 0.81, 0.82, 0.83, 0.84, 0.85, 0.86};
  const std::vector<double> want0 = {0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.05, 0.05, 0.025, 0.025, 0.02, 0.02, 0.02};
  const std::vector<double> want1 = {0.04, 0.04, 0.04, 0.02, 0.02, 0.02, 0.02, 0.02, 0.02, 0.02, 0.02, 0.02, 0.02};
  for (size_t i = 0; i < metrics.size(); ++i) {
    CAPTURE(i);
    plateau.step(metrics[i], opt);
    CHECK(opt.param_groups()[0].get("lr") == doctest::Approx(want0[i]).epsilon(1e-12));
    CHECK(opt.param_groups()[1].get("lr") == doctest::Approx(want1[i]).epsilon(1e-12));
  }
  CHECK(plateau.best() == 0.79991);
  // With a cooldown of 2 the two epochs after a reduction do not count as bad.
  train::ReduceLROnPlateau cool({.factor = 0.5, .patience = 0, .cooldown = 2});
  optim::SGD opt2({p}, optim::SGDOptions(1.0));
  std::vector<double> lrs;
  for (double m : {1.0, 1.0, 1.0, 1.0, 1.0}) {
    cool.step(m, opt2);
    lrs.push_back(opt2.lr());
  }
  CHECK(lrs == std::vector<double>{1.0, 0.5, 0.5, 0.5, 0.25});
}

TEST_CASE("ReduceLROnPlateau lowers the Trainer's lr on a plateau, and refuses the cosine schedule") {
  // lr 1e-9: the validation loss cannot improve by 1e-4 relative. Epoch 1 best, epochs 2 and 3 bad
  // (> patience 1): the lr halves at the end of epoch 3.
  fs::path dir = test::make_data_dir();
  data::DataLoader loader(test::synthetic_set(dir, true), {.batch_size = 64});
  data::DataLoader val(test::synthetic_set(dir, false), {.batch_size = 100});
  FitOptions o = test::quiet(4);
  o.lr = 1e-9;
  Trainer trainer(test::small_mlp(), o);
  trainer.add_callback(std::make_shared<train::ReduceLROnPlateau>(
      train::ReduceLROnPlateauOptions{.factor = 0.5, .patience = 1, .eps = 0}));
  train::FitResult r = trainer.fit(loader, &val);
  REQUIRE(r.epochs.size() == 4);
  std::vector<double> lrs;
  for (const auto& e : r.epochs) lrs.push_back(e.lr);
  CHECK(lrs == std::vector<double>{1e-9, 1e-9, 1e-9, 5e-10});  // the lr of each epoch's steps
  CHECK(trainer.optimizer().lr() == 5e-10);  // epoch 4 is the first bad one after the reduction
  o.schedule = train::Schedule::cosine;
  Trainer cosine(test::small_mlp(), o);
  cosine.add_callback(std::make_shared<train::ReduceLROnPlateau>());
  CHECK_THROWS_WITH_AS(cosine.fit(loader, &val), doctest::Contains("needs Schedule::constant"), Error);
}

namespace {

/// Records the model's weights at the start and after every step.
struct WeightLog : train::Callback {
  void on_train_begin(Trainer& t) override { take(t); }
  void on_step_end(Trainer& t, const train::StepMetrics&) override { take(t); }
  void take(Trainer& t) {
    std::vector<Tensor> w;
    for (const Tensor& p : t.model().parameters()) w.push_back(p.to(kFloat64).clone());
    weights.push_back(w);
  }
  std::vector<std::vector<Tensor>> weights;
};

}  // namespace

TEST_CASE("the EMA equals the hand-computed average after k steps, and validation sees it") {
  fs::path dir = test::make_data_dir();
  data::DataLoader loader(test::synthetic_set(dir, true), {.batch_size = 128});
  data::DataLoader val(test::synthetic_set(dir, false), {.batch_size = 100});
  FitOptions o = test::quiet(1);  // 5 steps
  o.lr = 0.1;
  auto model = test::small_mlp();
  Trainer trainer(model, o);
  auto log = std::make_shared<WeightLog>();
  auto ema = std::make_shared<train::EMA>(0.8);
  trainer.add_callback(log);
  trainer.add_callback(ema);
  train::FitResult r = trainer.fit(loader, &val);
  REQUIRE(log->weights.size() == 6);
  CHECK(ema->updates() == 5);
  // e_0 = w_0, e_i = 0.8 e_{i-1} + 0.2 w_i, in f64.
  const auto names = model->named_parameters();
  for (size_t j = 0; j < names.size(); ++j) {
    Tensor e = log->weights[0][j];
    for (size_t i = 1; i < log->weights.size(); ++i) e = e * 0.8 + log->weights[i][j] * 0.2;
    Tensor got = ema->state_dict().at(names[j].first).to(kFloat64);
    CHECK((got - e).abs().max().item<double>() < 1e-6);
    CHECK((log->weights.back()[j] - e).abs().max().item<double>() > 1e-4);  // the average is not the weights
  }
  // Validation ran on the average and the live weights came back after it.
  for (size_t j = 0; j < names.size(); ++j)
    CHECK((model->parameters()[j].to(kFloat64) - log->weights.back()[j]).abs().max().item<double>() == 0);
  const double live_loss = trainer.evaluate(val).loss;
  ema->copy_to(*model);
  CHECK(trainer.evaluate(val).loss == *r.val_loss);
  CHECK(live_loss != *r.val_loss);
}

TEST_CASE("EMA, ReduceLROnPlateau and EarlyStopping state resume exactly from a checkpoint") {
  fs::path dir = test::make_data_dir();
  auto train_set = test::synthetic_set(dir, true), val_set = test::synthetic_set(dir, false);
  auto run = [&](const std::string& ckpt, int64_t stop_epoch) {
    FitOptions o = test::quiet(4);
    o.checkpoint = ckpt;
    auto model = test::small_mlp();
    data::DataLoader loader(train_set, {.batch_size = 64, .shuffle = true});
    data::DataLoader val(val_set, {.batch_size = 100});
    Trainer trainer(model, o);
    trainer.add_callback(std::make_shared<train::EMA>(0.9));
    trainer.add_callback(std::make_shared<train::ReduceLROnPlateau>(
        train::ReduceLROnPlateauOptions{.monitor = train::Monitor::val_accuracy, .factor = 0.5, .patience = 0,
                                        .threshold = 0.5}));  // accuracy cannot grow by half again: halves every epoch
    trainer.add_callback(std::make_shared<train::EarlyStopping>(train::EarlyStoppingOptions{.patience = 10}));
    if (stop_epoch > 0) trainer.add_callback(std::make_shared<test::StopAt>(0, stop_epoch));
    return trainer.fit(loader, &val);
  };
  const std::string full = (dir / "cb_full.safetensors").string(), part = (dir / "cb_part.safetensors").string();
  fs::remove(full);
  fs::remove(part);
  train::FitResult a = run(full, 0);
  train::FitResult p1 = run(part, 2);
  CHECK(p1.epochs_done == 2);
  train::FitResult p2 = run(part, 0);
  CHECK(p2.epochs_done == 4);
  REQUIRE(a.epochs.size() == 4);
  REQUIRE(p2.epochs.size() == 2);
  CHECK(a.epochs[3].lr < a.epochs[1].lr);  // the plateau rule acted
  CHECK(p2.epochs[1].lr == a.epochs[3].lr);
  CHECK(*p2.val_loss == *a.val_loss);
  CHECK(test::file_bytes(part) == test::file_bytes(full));
  CHECK(test::file_bytes(train::EMA::file_for(part)) == test::file_bytes(train::EMA::file_for(full)));
}
