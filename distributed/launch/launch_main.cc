// `launch`: runs one process per local rank of a distributed job (see distributed/launch/launch.h).
//   tools/bazel run //distributed/launch -- --nproc-per-node 2 -- bazel-bin/examples/my_trainer --epochs 1
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "distributed/launch/launch.h"

int main(int argc, char** argv) {
  using namespace kiln::dist;
  std::vector<std::string> args(argv + 1, argv + argc);
  std::optional<LaunchOptions> options;
  try {
    options = parse_launch_args(args);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "launch: %s\n\n%s", e.what(), launch_usage().c_str());
    return 2;
  }
  if (!options) {
    std::fputs(launch_usage().c_str(), stdout);
    return 0;
  }
  try {
    return launch(*options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
