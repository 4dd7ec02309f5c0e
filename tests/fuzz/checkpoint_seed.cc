// Writes the checkpoint fuzzer's seeds: checkpoint_seed DIR writes DIR/tiny_adam (loads into
// checkpoint_model.h's model and optimizer) and DIR/tiny_no_optimizer (refused: no optimizer
// state). Run once; the files are committed under corpus/checkpoint/.
#include <cstdio>
#include <string>

#include "train/checkpoint.h"
#include "tests/fuzz/checkpoint_model.h"

int main(int argc, char** argv) {
  using namespace kiln;
  if (argc != 2) {
    std::fprintf(stderr, "usage: checkpoint_seed DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  fuzz::Tiny model;
  optim::Adam opt(model.parameters(), 0.1);
  fuzz::train_step(model, opt);
  train::TrainingState st;
  st.step = 12;
  st.epoch = 3;
  st.rng = {42, 7};
  st.extra = {{"run", "seed"}};
  train::save_checkpoint(dir + "/tiny_adam", model, &opt, st);
  train::save_checkpoint(dir + "/tiny_no_optimizer", model, nullptr, st);
  return 0;
}
