// Fuzzes the command lines of the main job (//examples:mnist's flags) and of the launcher
// (parse_launch_args). The input is the argument list, NUL-separated. Contract under test: any
// argument list is accepted or refused through the parsers' own channels (MnistFlags::parse
// returns 0 or 2, with cli::parse's or finish()'s message, parse_launch_args throws UsageError);
// nothing crashes or throws past them.
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "distributed/launch/launch.h"
#include "examples/mnist_flags.h"

namespace {

std::vector<std::string> split_args(const uint8_t* data, size_t size) {
  if (size == 0) return {};
  std::vector<std::string> args(1);
  for (size_t i = 0; i < size && args.size() <= 64; ++i) {
    if (data[i] == 0) args.emplace_back();
    else args.back().push_back(static_cast<char>(data[i]));
  }
  return args;
}

void mnist(const std::vector<std::string>& args) {
  kiln::examples::MnistFlags flags;
  std::vector<const char*> argv = {"mnist"};
  for (const std::string& a : args) argv.push_back(a.c_str());
  // The main's own path: declare, parse, then finish()'s checks across flags.
  const int rc = flags.parse(static_cast<int>(argv.size()), argv.data(), "mnist", "fuzz", "");
  if (rc != -1 && rc != 0 && rc != 2) std::abort();
}

void launcher(const std::vector<std::string>& args) {
  try {
    std::optional<kiln::dist::LaunchOptions> o = kiln::dist::parse_launch_args(args);
    if (o && (o->argv.empty() || o->node_rank >= o->nnodes || o->nproc_per_node < 1)) std::abort();
  } catch (const kiln::dist::UsageError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The parsers report on stdout/stderr; thousands of runs a second would flood the test log.
  static std::ostringstream sink;
  static bool quiet = [] {
    std::cout.rdbuf(sink.rdbuf());
    std::cerr.rdbuf(sink.rdbuf());
    return true;
  }();
  (void)quiet;
  sink.str("");
  const std::vector<std::string> args = split_args(data, size);
  mnist(args);
  launcher(args);
  return 0;
}
