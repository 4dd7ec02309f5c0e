// Trains a GPT-2-style model on bytes of English text (Debian's `fortunes` by default), printing a
// progress line per step, the validation loss every --eval-every steps, a sample and one JSON line.
// One process, --ddp and --zero 1 run on train::Trainer (train/gpt_fit.h: the recipe's options,
// data and callbacks); pipelines, --tp and --zero 2|3 on their own trainers (train/gpt_trainer.h).
//   tools/bazel run //examples:gpt -- --model d6 --max-steps 200
#include <cstdio>
#include <iostream>

#include "examples/gpt_flags.h"
#include "train/gpt_trainer.h"

using namespace kiln;

int main(int argc, char** argv) {
  cli::App app("Trains a GPT-2-style model on the bytes of an English text corpus.", "gpt");
  examples::GptFlags flags;
  flags.declare(app);
  if (int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  if (std::string problem = flags.finish(); !problem.empty()) return cli::usage_error(app, problem);
  try {
    train::gpt::TrainResult r = train::gpt::train(flags.c, std::cout);
    if (r.rank == 0) std::cout << train::gpt::result_json(flags.c, r) << std::endl;
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "gpt: %s\n", e.what());
    return 1;
  }
}
