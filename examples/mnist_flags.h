// The main job's command line (//examples:mnist): every flag declared once with its range or
// choices, and the checks across flags. Apart from main so the flag set can be fuzzed
// (//tests/fuzz:cli) and tested without starting a run.
#pragma once

#include <string>
#include <vector>

#include "core/util/cli.h"
#include "train/trainer.h"

namespace kiln::examples {

/// Every flag of the main job, declared once: name, destination, help, range or choices.
struct MnistFlags {
  /// The defaults: set fields of `c` (and sgd_lr) before declare() to change them (the ResNet recipe does).
  train::TrainConfig c;
  double sgd_lr = 0.05;  // --lr when neither it nor another optimizer is given
  std::string device, matmul_precision = "highest";
  std::vector<int64_t> profile_steps{5, 2, 5};  // --profile-steps wait,warmup,active
  CLI::Option *lr = nullptr, *width = nullptr, *micro_batches = nullptr, *pipeline_schedule = nullptr, *pipeline_balance = nullptr,
             *virtual_stages = nullptr;

  /// Adds the flags to `app`, writing into this struct.
  void declare(CLI::App& app);
  /// The checks that involve more than one flag, or the machine; an error message or "".
  std::string finish();
  /// The pipeline flags against each other and the model (the world size is checked at launch).
  std::string check_pipeline() const;
};

}  // namespace kiln::examples
