// The GPT trainer's command line (//examples:gpt): every flag declared once with its range or
// choices, and the checks across flags. Apart from main, as the main job's (mnist_flags.h).
#pragma once

#include <string>
#include <vector>

#include "core/util/cli.h"
#include "train/gpt_trainer.h"

namespace kiln::examples {

/// Every flag of the GPT trainer, writing into `c` (a train::gpt::TrainConfig).
struct GptFlags {
  train::gpt::TrainConfig c;
  std::string device = "cpu";
  int64_t vocab = 256;
  CLI::Option *n_layer = nullptr, *n_head = nullptr, *n_embd = nullptr, *block = nullptr, *vocab_opt = nullptr,
              *model = nullptr, *micro = nullptr, *schedule = nullptr,
              *virtual_stages = nullptr;
  int64_t layers = 0, heads = 0, embd = 0, block_size = 0;
  bool fsdp = false;
  std::vector<int64_t> profile_steps{2, 1, 3};  // --profile-steps wait,warmup,active

  /// Adds the flags to `app`, writing into this struct.
  void declare(CLI::App& app);
  /// The shape from --model, then the explicit shape flags, and the checks across flags; an
  /// error message or "".
  std::string finish();
};

}  // namespace kiln::examples
