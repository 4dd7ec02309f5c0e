// Writes a TensorBoard event file with known scalars (the trainer's tags) and the same values as
// JSON, for tensorboard_test.sh to read back with TensorBoard's own reader.
//   tb_write_scalars LOGDIR EXPECTED_JSON
#include <cmath>
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "profiler/tensorboard.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: tb_write_scalars LOGDIR EXPECTED_JSON\n");
    return 2;
  }
  kiln::profiler::SummaryWriter w(argv[1]);
  nlohmann::json expected = nlohmann::json::object();
  const char* tags[] = {"train/loss", "train/lr", "train/grad_norm", "train/loss_scale", "train/samples_per_sec",
                        "test/accuracy"};
  for (int64_t step = 1; step <= 300; step += 37) {
    for (int t = 0; t < 6; ++t) {
      double v = std::sin(0.1 * static_cast<double>(step) + t) * std::pow(10.0, t - 2);
      w.add_scalar(tags[t], v, step);
      expected[tags[t]].push_back({step, static_cast<float>(v)});
    }
  }
  std::ofstream(argv[2]) << expected.dump();
  std::printf("wrote %s\n", w.path().c_str());
  return 0;
}
