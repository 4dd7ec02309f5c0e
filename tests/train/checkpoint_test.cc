// Checkpoints: model, optimizer and training state round trip; damaged or mismatching files are
// refused naming the file, and leave the model, optimizer and generator unchanged.
#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "train/checkpoint.h"
#include "nn/linear.h"
#include "nn/safetensors.h"
#include "optim/adam.h"
#include "optim/sgd.h"
#include "tests/file_util.h"

using namespace kiln;
using namespace kiln::nn;
using namespace kiln::train;

using namespace kiln::test;

namespace {

/// A parameter, a floating buffer, an integer buffer and a child.
struct Tiny : Module {
  explicit Tiny(int64_t width = 2) : Module("Tiny") {
    weight = register_parameter("weight", randn({3, width}));
    running = register_buffer("running", randn({3}));
    count = register_buffer("count", tensor<int64_t>({5}));
    head = register_module("head", Linear(3, 2));
  }
  Tensor forward(const Tensor& x) override { return head(x.matmul(weight.t()) + running); }
  Tensor weight, running, count;
  ModulePtr<Linear> head;
};

/// Deep copies, to compare against after a refused load.
std::map<std::string, Tensor> snapshot(const std::map<std::string, Tensor>& state) {
  std::map<std::string, Tensor> out;
  for (const auto& [k, v] : state) out[k] = v.detach().clone();
  return out;
}

bool same_state(const std::map<std::string, Tensor>& a, const std::map<std::string, Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [k, v] : a)
    if (!b.count(k) || !identical(v, b.at(k))) return false;
  return true;
}

/// One Adam step so the optimizer has per-parameter state.
void train_step(Tiny& m, optim::Optimizer& opt) {
  opt.zero_grad();
  m(randn({4, m.weight.size(1)})).square().sum().backward();
  opt.step();
}

}  // namespace

TEST_CASE("checkpoint round trip: model, optimizer, step, epoch, rng and extra metadata") {
  std::string dir = scratch_dir("ckpt_roundtrip");
  std::string path = dir + "/ckpt.safetensors";
  manual_seed(1);
  Tiny a;
  optim::Adam opt_a(a.parameters(), 0.1);
  train_step(a, opt_a);
  TrainingState st;
  st.step = 1234;
  st.epoch = 7;
  st.batch = 42;
  st.rng = default_generator().state();
  st.extra = {{"run", "fashion-mlp"}, {"best_acc", "0.87"}};
  save_checkpoint(path, a, &opt_a, st);
  Tensor next_a = randn({3});  // what the generator gives after the saved point

  manual_seed(2);
  Tiny b;
  optim::Adam opt_b(b.parameters(), 0.5);
  TrainingState got = load_checkpoint(path, b, &opt_b);
  CHECK(got.step == 1234);
  CHECK(got.epoch == 7);
  CHECK(got.batch == 42);
  CHECK(got.rng.seed == st.rng.seed);
  CHECK(got.rng.offset == st.rng.offset);
  CHECK(got.extra == st.extra);
  CHECK(same_state(a.state_dict(), b.state_dict()));
  CHECK(same_state(opt_a.state_dict(), opt_b.state_dict()));
  CHECK(opt_b.lr() == 0.1);
  CHECK(identical(randn({3}), next_a));  // the generator resumed where it was saved

  // Training continues identically from the original and from the restore.
  Tensor x = randn({4, 2});
  for (auto [m, o] : {std::pair<Tiny*, optim::Optimizer*>{&a, &opt_a}, {&b, &opt_b}}) {
    o->zero_grad();
    (*m)(x).square().sum().backward();
    o->step();
  }
  CHECK(same_state(a.state_dict(), b.state_dict()));
  CHECK(same_state(opt_a.state_dict(), opt_b.state_dict()));

  // The file is plain safetensors with the documented layout.
  SafetensorsContents raw = load_safetensors(path);
  CHECK(raw.tensors.count("model.weight") == 1);
  CHECK(raw.tensors.count("model.running") == 1);
  CHECK(raw.tensors.count("model.head.bias") == 1);
  CHECK(raw.tensors.count("optim.state.0.exp_avg") == 1);
  CHECK(raw.metadata.at("kiln.step") == "1234");
  CHECK(raw.metadata.at("kiln.batch") == "42");
  CHECK(raw.metadata.at("extra.run") == "fashion-mlp");
  CHECK(raw.metadata.at("kiln.optimizer") == "Adam");
}

TEST_CASE("checkpoints without an optimizer, and loading without one") {
  std::string dir = scratch_dir("ckpt_no_optim");
  Tiny a, b;
  save_checkpoint(dir + "/m.safetensors", a, nullptr, {});
  load_checkpoint(dir + "/m.safetensors", b, nullptr, nullptr);
  CHECK(same_state(a.state_dict(), b.state_dict()));
  optim::SGD sgd(b.parameters(), 0.1);
  auto before = snapshot(b.state_dict());
  std::string msg = error_of([&] { load_checkpoint(dir + "/m.safetensors", b, &sgd); });
  CHECK(contains(msg, dir + "/m.safetensors"));
  CHECK(contains(msg, "no optimizer state"));
  CHECK(same_state(b.state_dict(), before));

  // A checkpoint with optimizer state loads into a model alone.
  optim::SGD sgd_a(a.parameters(), optim::SGDOptions(0.1).set_momentum(0.9));
  save_checkpoint(dir + "/full.safetensors", a, &sgd_a, {});
  Tiny c;
  load_checkpoint(dir + "/full.safetensors", c, nullptr, nullptr);
  CHECK(same_state(a.state_dict(), c.state_dict()));
}

TEST_CASE("mismatching checkpoints are refused and change nothing") {
  std::string dir = scratch_dir("ckpt_mismatch");
  std::string path = dir + "/ckpt.safetensors";
  Tiny a;
  optim::Adam opt_a(a.parameters(), 0.1);
  train_step(a, opt_a);
  save_checkpoint(path, a, &opt_a, {.step = 3, .epoch = 1, .rng = {99, 5}});

  auto check_refused = [&](Module& m, optim::Optimizer* opt, std::initializer_list<std::string> parts) {
    auto model_before = snapshot(m.state_dict());
    auto opt_before = opt ? snapshot(opt->state_dict()) : std::map<std::string, Tensor>{};
    manual_seed(321);
    GeneratorState rng_before = default_generator().state();
    std::string msg = error_of([&] { load_checkpoint(path, m, opt); });
    CHECK_MESSAGE(contains(msg, path), msg);
    for (const std::string& p : parts) CHECK_MESSAGE(contains(msg, p), msg);
    CHECK(same_state(m.state_dict(), model_before));
    if (opt) CHECK(same_state(opt->state_dict(), opt_before));
    CHECK(default_generator().state().offset == rng_before.offset);
    CHECK(default_generator().state().seed == rng_before.seed);
  };

  Tiny wider(5);  // weight [3, 5] instead of [3, 2]
  optim::Adam opt_w(wider.parameters(), 0.1);
  check_refused(wider, &opt_w, {"mismatched", "weight (checkpoint [3, 2], model [3, 5])"});

  struct Extra : Tiny {
    Extra() { register_parameter("more", zeros({1})); }
  } extra;
  check_refused(extra, nullptr, {"missing keys [more]"});

  Linear other(3, 2);
  check_refused(other, nullptr, {"unexpected keys", "running"});

  // Model matches, optimizer does not: it is validated before the model is touched.
  Tiny same;
  optim::SGD wrong_kind(same.parameters(), optim::SGDOptions(0.1).set_momentum(0.9));
  check_refused(same, &wrong_kind, {"optimizer state does not match"});
  optim::Adam fewer({same.weight}, 0.1);
  check_refused(same, &fewer, {"optimizer state does not match"});
}

TEST_CASE("truncated and corrupted checkpoints are refused and change nothing") {
  std::string dir = scratch_dir("ckpt_damaged");
  std::string good = dir + "/good.safetensors", path = dir + "/bad.safetensors";
  Tiny a;
  optim::Adam opt_a(a.parameters(), 0.1);
  train_step(a, opt_a);
  save_checkpoint(good, a, &opt_a, {.step = 10});
  const auto bytes = read_bytes(good);

  Tiny b;
  optim::Adam opt_b(b.parameters(), 0.1);
  train_step(b, opt_b);
  auto model_before = snapshot(b.state_dict());
  auto opt_before = snapshot(opt_b.state_dict());
  for (size_t keep : {size_t(0), size_t(7), size_t(100), bytes.size() / 2, bytes.size() - 1}) {
    CAPTURE(keep);
    write_bytes(path, std::vector<uint8_t>(bytes.begin(), bytes.begin() + static_cast<long>(keep)));
    std::string msg = error_of([&] { load_checkpoint(path, b, &opt_b); });
    CHECK_MESSAGE(contains(msg, path), msg);
  }
  for (size_t at : {size_t(0), size_t(3), size_t(8), size_t(9), size_t(40)}) {
    CAPTURE(at);
    auto bad = bytes;
    bad[at] ^= 0x80;
    write_bytes(path, bad);
    std::string msg = error_of([&] { load_checkpoint(path, b, &opt_b); });
    CHECK_MESSAGE(contains(msg, path), msg);
  }
  CHECK(same_state(b.state_dict(), model_before));
  CHECK(same_state(opt_b.state_dict(), opt_before));

  // Metadata that is not a Kiln checkpoint's.
  save_safetensors(path, {{"model.weight", zeros({3, 2})}});
  CHECK(contains(error_of([&] { load_checkpoint(path, b, nullptr); }), "kiln.format"));
  CHECK(same_state(b.state_dict(), model_before));
}

TEST_CASE("a failed checkpoint save leaves the previous checkpoint in place") {
  std::string dir = scratch_dir("ckpt_failed_save");
  std::string path = dir + "/ckpt.safetensors";
  Tiny a;
  save_checkpoint(path, a, nullptr, {.step = 1});
  const auto before = read_bytes(path);
  std::string nowhere = dir + "/missing/ckpt.safetensors";
  CHECK(contains(error_of([&] { save_checkpoint(nowhere, a, nullptr, {.step = 2}); }), nowhere));
  CHECK(read_bytes(path) == before);
  CHECK_FALSE(std::filesystem::exists(dir + "/missing"));
}

TEST_CASE("a checkpoint with a flipped byte in a weight is refused naming the tensor, and changes nothing") {
  std::string dir = scratch_dir("ckpt_bitflip");
  std::string path = dir + "/ckpt.safetensors";
  manual_seed(3);
  Tiny a;
  optim::Adam opt_a(a.parameters(), 0.1);
  train_step(a, opt_a);
  save_checkpoint(path, a, &opt_a, {});
  auto bytes = read_bytes(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];
  auto header = nlohmann::json::parse(std::string(bytes.begin() + 8, bytes.begin() + 8 + static_cast<long>(n)));
  const uint64_t begin = header["model.weight"]["data_offsets"][0].get<uint64_t>();
  bytes[8 + n + begin + 1] ^= 0x01;  // one bit of model.weight's first float
  write_bytes(path, bytes);

  manual_seed(4);
  Tiny b;
  optim::Adam opt_b(b.parameters(), 0.1);
  auto before = b.state_dict();
  std::map<std::string, Tensor> copy;
  for (auto& [k, t] : before) copy[k] = t.clone();
  std::string msg = error_of([&] { load_checkpoint(path, b, &opt_b); });
  CHECK_MESSAGE(contains(msg, path), msg);
  CHECK_MESSAGE(contains(msg, "tensor \"model.weight\" fails its checksum"), msg);
  for (auto& [k, t] : b.state_dict()) CHECK(identical(t, copy.at(k)));
}
