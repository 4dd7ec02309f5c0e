// The ResNet recipe: ResNet-18 (models/resnet.h, torchvision's layout with the small-input stem)
// trained on Fashion-MNIST padded to 32x32, through the main job's train::Trainer (train/trainer.h), so
// every flag of //examples:mnist works here too (--ddp, --save/--resume, --amp, --profile, ...).
// The defaults are the recipe: base width 16, SGD with momentum 0.9 at lr 0.1, cosine decay per
// step, batch 128, 3 epochs (>= 91% test accuracy; docs/resnet.md).
//   tools/bazel run //examples:resnet -- --width 16 --epochs 3
#include <cstdio>
#include <iostream>

#include "distributed/launch/exit_codes.h"
#include "examples/mnist_flags.h"
#include "train/trainer.h"

using namespace kiln;

int main(int argc, char** argv) {
  examples::MnistFlags flags;
  flags.c.model = "resnet18";
  flags.c.width = 16;
  flags.c.epochs = 3;
  flags.c.batch_size = 128;
  flags.c.schedule = train::Schedule::cosine;
  flags.c.lr = flags.sgd_lr = 0.1;
  if (int rc = flags.parse(argc, argv, "resnet",
                           "Trains ResNet-18 on Fashion-MNIST (padded to 32x32) on the best device present.",
                           "\nThe flags are //examples:mnist's (see its --help), with the recipe's defaults; --width 64 "
                           "is\ntorchvision's ResNet-18. --pipeline-stages does not apply (ResNet-18 is not a "
                           "Sequential).\n");
      rc >= 0)
    return rc;
  const train::TrainConfig& config = flags.c;
  try {
    train::TrainResult r = train::train(config, std::cout);
    if (r.rank == 0) std::cout << train::result_json(config, r) << std::endl;
    return r.preempted ? dist::kExitPreempted : 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "resnet: %s\n", e.what());
    return 1;
  }
}
