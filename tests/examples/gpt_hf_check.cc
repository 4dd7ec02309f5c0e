// Kiln side of tests/examples:gpt_hf_parity_test: loads the Hugging Face GPT-2 fixture written by
// gpt_hf_fixture.py into Kiln's GPT, compares logits and loss with transformers' (f32, 1e-4), checks
// that a model of another shape is refused by name, and saves the model back in HF's layout.
//   gpt_hf_check HF_DIR OUT_DIR      exit 0: all matched
#include <cmath>
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/ops.h"
#include "models/gpt_hf.h"

using namespace kiln;
using namespace kiln::models::gpt;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: gpt_hf_check HF_DIR OUT_DIR\n");
    return 2;
  }
  const std::string dir = argv[1], out = argv[2];
  try {
    nlohmann::json e = nlohmann::json::parse(std::ifstream(dir + "/expected.json"));
    GPT model(read_hf_config(dir));
    load_hf(model, dir);
    model.eval();
    std::vector<int64_t> flat;
    for (auto& row : e["tokens"])
      for (auto& v : row) flat.push_back(v.get<int64_t>());
    const int64_t b = static_cast<int64_t>(e["tokens"].size()), t = static_cast<int64_t>(flat.size()) / b;
    Tensor tokens = tensor(flat, {b, t});
    NoGradGuard g;
    Tensor logits = model.forward(tokens);
    Tensor expected = tensor(e["logits"].get<std::vector<float>>(), logits.sizes());
    const double diff = (logits - expected).abs().max().item<double>();
    // HF's loss predicts token i + 1 from position i.
    const double loss =
        GPT::loss(logits.narrow(1, 0, t - 1).contiguous(), tokens.narrow(1, 1, t - 1).contiguous()).item<double>();
    const double want = e["loss"].get<double>();
    std::printf("kiln load of hf: max |logit diff| %.3g, loss %.6f vs %.6f\n", diff, loss, want);
    if (!(diff <= 1e-4) || !(std::abs(loss - want) <= 1e-4)) {
      std::fprintf(stderr, "kiln load of hf: MISMATCH\n");
      return 1;
    }
    GPTConfig wrong = model.config;
    wrong.n_embd = 64;
    GPT other(wrong);
    try {
      load_hf(other, dir);
      std::fprintf(stderr, "a model of another width loaded the fixture without an error\n");
      return 1;
    } catch (const Error& err) {
      const std::string msg = err.what();
      if (msg.find("does not fit the model") == std::string::npos || msg.find("wte.weight") == std::string::npos) {
        std::fprintf(stderr, "unclear error for a wrong shape: %s\n", msg.c_str());
        return 1;
      }
    }
    save_hf(model, out);
    std::printf("saved kiln's model to %s\n", out.c_str());
    return 0;
  } catch (const std::exception& err) {
    std::fprintf(stderr, "gpt_hf_check: %s\n", err.what());
    return 1;
  }
}
