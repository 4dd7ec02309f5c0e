// Fuzzes load_checkpoint into checkpoint_model.h's model and Adam optimizer. Contract under test
// (checkpoint.h): a file either restores or throws kiln::Error leaving the model, the optimizer
// and the generator exactly as they were; nothing else escapes.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>

#include "core/error.h"
#include "train/checkpoint.h"
#include "tests/fuzz/checkpoint_model.h"
#include "tests/fuzz/fuzz_file.h"

namespace {

using namespace kiln;

std::map<std::string, Tensor> snapshot(const std::map<std::string, Tensor>& state) {
  std::map<std::string, Tensor> out;
  for (const auto& [k, v] : state) out[k] = v.detach().clone();
  return out;
}

bool same(const std::map<std::string, Tensor>& a, const std::map<std::string, Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [k, v] : a) {
    auto it = b.find(k);
    if (it == b.end() || v.dtype() != it->second.dtype() || v.sizes() != it->second.sizes()) return false;
    Tensor x = v.contiguous(), y = it->second.contiguous();
    if (std::memcmp(x.data_ptr(), y.data_ptr(), static_cast<size_t>(x.numel()) * x.element_size()) != 0) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fuzz::FuzzFile file;
  const std::string& path = file.write(data, size);

  fuzz::Tiny model;
  optim::Adam opt(model.parameters(), 0.1);
  fuzz::train_step(model, opt);
  Generator rng(7);
  const auto model_before = snapshot(model.state_dict());
  const auto opt_before = snapshot(opt.state_dict());
  try {
    train::load_checkpoint(path, model, &opt, &rng);
  } catch (const Error&) {
    if (!same(model.state_dict(), model_before) || !same(opt.state_dict(), opt_before)) std::abort();
    if (rng.state().seed != 7 || rng.state().offset != 0) std::abort();
  }
  return 0;
}
