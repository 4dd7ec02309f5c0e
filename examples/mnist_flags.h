// The main job's command line (//examples:mnist): every flag declared once with its range or
// choices, and the checks across flags. Apart from main so the flag set can be fuzzed
// (//tests/fuzz:cli) and tested without starting a run.
#pragma once

#include <string>
#include <vector>

#include "train/trainer.h"

// CLI11's types, named only: the mains that use this header (mnist, resnet) do not parse CLI11's
// headers (3-5 s of compile each); mnist_flags.cc includes core/util/cli.h.
namespace CLI {
class App;
class Option;
}  // namespace CLI

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

  /// The whole command line: declares the flags on an app called `name` (its --help shows
  /// `description`, then `footer`), parses argv and runs finish(). -1 when the program should go
  /// on, else the status to exit with (cli::parse's: 0 after --help, 2 after a bad command line,
  /// its message printed).
  int parse(int argc, const char* const* argv, const std::string& name, const std::string& description,
            const std::string& footer);
  /// Adds the flags to `app`, writing into this struct.
  void declare(CLI::App& app);
  /// The checks that involve more than one flag, or the machine; an error message or "".
  std::string finish();
  /// The pipeline flags against each other and the model (the world size is checked at launch).
  std::string check_pipeline() const;
};

}  // namespace kiln::examples
