// Command-line parsing for the launcher: flags in both "--flag value" and "--flag=value"
// forms, dashes or underscores (torchrun spells them both ways).
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "distributed/launch.h"

namespace kiln::dist {
namespace {

int parse_int_flag(const std::string& flag, const std::string& v) {
  int x = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (v.empty() || ec != std::errc() || end != v.data() + v.size())
    throw UsageError(fmt::format("{} expects an integer, got \"{}\"", flag, v));
  return x;
}

double parse_seconds_flag(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  if (v.empty() || end != v.c_str() + v.size() || !std::isfinite(x) || x < 0)
    throw UsageError(fmt::format("{} expects a number of seconds >= 0, got \"{}\"", flag, v));
  return x;
}

}  // namespace

std::string launch_usage() {
  return R"(usage: launch [flags] [--] PROGRAM [ARGS...]

Starts --nproc-per-node processes of PROGRAM on this node, each with RANK, LOCAL_RANK,
WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT and KILN_NUM_THREADS set, and prints
their output with a "[rank N] " prefix. If one process fails, the others are stopped.

flags:
  --nproc-per-node N   processes on this node (default 1)
  --nnodes M           nodes in the job (default 1)
  --node-rank R        this node's index, 0..M-1 (default 0)
  --master-addr A      host running rank 0's store (default 127.0.0.1)
  --master-port P      its port (default: a free port; required when M > 1)
  --kill-grace S       seconds ranks get to exit after SIGTERM before SIGKILL (default 5)
  -h, --help           this text

Under `bazel run`, a relative PROGRAM path is also looked up in the directory bazel was run
from ($BUILD_WORKING_DIRECTORY), and the processes start in that directory.
)";
}

std::optional<LaunchOptions> parse_launch_args(const std::vector<std::string>& args) {
  LaunchOptions o;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a == "-h" || a == "--help") return std::nullopt;
    if (a.empty() || a[0] != '-') break;  // the program
    std::string flag = a, value;
    bool has_value = false;
    if (size_t eq = a.find('='); eq != std::string::npos) {
      flag = a.substr(0, eq);
      value = a.substr(eq + 1);
      has_value = true;
    }
    for (size_t k = 2; k < flag.size(); ++k)
      if (flag[k] == '_') flag[k] = '-';
    auto take = [&]() -> std::string {
      if (has_value) return value;
      if (i + 1 >= args.size()) throw UsageError(fmt::format("{} needs a value", flag));
      return args[++i];
    };
    if (flag == "--nproc-per-node") o.nproc_per_node = parse_int_flag(flag, take());
    else if (flag == "--nnodes") o.nnodes = parse_int_flag(flag, take());
    else if (flag == "--node-rank") o.node_rank = parse_int_flag(flag, take());
    else if (flag == "--master-addr") o.master_addr = take();
    else if (flag == "--master-port") o.master_port = parse_int_flag(flag, take());
    else if (flag == "--kill-grace") o.kill_grace_s = parse_seconds_flag(flag, take());
    else throw UsageError(fmt::format("unknown flag \"{}\"", a));
  }
  o.argv.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  if (o.argv.empty()) throw UsageError("no program given");
  if (o.nproc_per_node < 1) throw UsageError(fmt::format("--nproc-per-node {} must be at least 1", o.nproc_per_node));
  if (o.nnodes < 1) throw UsageError(fmt::format("--nnodes {} must be at least 1", o.nnodes));
  if (o.node_rank < 0 || o.node_rank >= o.nnodes)
    throw UsageError(fmt::format("--node-rank {} is out of range 0..{} for --nnodes {}", o.node_rank, o.nnodes - 1,
                                 o.nnodes));
  if (o.master_addr.empty()) throw UsageError("--master-addr is empty");
  if (o.master_port < 0 || o.master_port > 65535)
    throw UsageError(fmt::format("--master-port {} is out of range 0..65535 (0: a free port)", o.master_port));
  if (o.nnodes > 1 && o.master_port == 0)
    throw UsageError("--master-port is required with --nnodes > 1: every node must use the same port");
  return o;
}

}  // namespace kiln::dist
