// The machine a benchmark runs on, and whether it is quiet enough to report from. Before the
// benchmark starts, HostCheck samples /proc/stat twice, 2 s apart, while this process sleeps:
// every busy jiffy in that window is another process's. Above 0.2 busy cores the benchmark
// refuses to report (exit kLoadedExitCode, naming the figure) unless --allow-load was given,
// which marks its JSON "noisy": true. It prints a "host:" line at the start and one at the end,
// and adds "host" (CPU model, cores, load averages, busy cores) and "noisy" to the closing JSON.
// The parsers take /proc text as strings, so tests check them on fixed text (bench/host_check.py
// is the Python scripts' copy of the same rules).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace kiln::bench {

/// More busy cores than this over the sample and a benchmark refuses to report.
inline constexpr double kMaxBusyCores = 0.2;
/// Seconds between the two /proc/stat samples.
inline constexpr double kSampleSeconds = 2.0;
/// main()'s exit status when it refused to report from a loaded machine.
inline constexpr int kLoadedExitCode = 3;

/// One /proc/stat "cpu" line's jiffies: busy = user + nice + system + irq + softirq + steal;
/// total = busy + idle + iowait (guest time is already inside user and nice).
struct CpuJiffies {
  uint64_t busy = 0, total = 0;
};

/// The aggregate "cpu " line of /proc/stat text (fields missing after idle count 0). Throws
/// std::runtime_error when it is missing or has fewer than four fields.
CpuJiffies parse_proc_stat(std::string_view proc_stat);

/// How many CPUs the aggregate line sums: the "cpuN" lines of /proc/stat text (at least 1).
int count_cpus(std::string_view proc_stat);

/// The first "model name" of /proc/cpuinfo text, its spaces collapsed; else the first
/// "Processor" or "cpu model" line (some arm64 and MIPS kernels); else "unknown CPU".
std::string parse_cpu_model(std::string_view cpuinfo);

/// The 1-minute load average: the first field of /proc/loadavg text (-1 when unreadable).
double parse_loadavg(std::string_view loadavg);

/// Cores kept busy between two samples: the busy share of the jiffies that passed, times the
/// CPUs (0 when no jiffies passed).
double busy_cores(CpuJiffies before, CpuJiffies after, int cpus);

/// What a benchmark may do after its sample: report (quiet), report marked "noisy" (loaded, but
/// --allow-load), or refuse (loaded).
enum class LoadVerdict { kQuiet, kNoisy, kRefused };
LoadVerdict judge_load(double busy_cores, bool allow_load, double max_busy_cores = kMaxBusyCores);

/// The whole file at `path` ("" when it cannot be read).
std::string read_text_file(const std::string& path);

/// The host check of one benchmark run (see the top of this file). Copyable: a forked rank
/// that prints the closing JSON line finishes its copy.
class HostCheck {
 public:
  /// Reads the CPU model, cores and load average, samples /proc/stat over `sample_s` seconds
  /// (sleeping), prints the start line on stdout and, when refused, the reason on stderr.
  HostCheck(std::string program, bool allow_load, double sample_s = kSampleSeconds);

  /// False when the machine was loaded and --allow-load not given: main() should return
  /// kLoadedExitCode without measuring.
  bool may_report() const { return verdict_ != LoadVerdict::kRefused; }
  bool noisy() const { return verdict_ == LoadVerdict::kNoisy; }
  double busy_cores() const { return busy_; }

  /// Prints the end line (the load average again) and returns the "host" object: cpu_model,
  /// cores, load_average_start, load_average_end, busy_cores, max_busy_cores.
  nlohmann::ordered_json finish() {
    print_end();
    return host_json<nlohmann::ordered_json>();
  }

  /// The same, adding "host" and "noisy" to a benchmark's closing JSON object.
  template <class Json>
  void finish(Json& closing) {
    print_end();
    closing["host"] = host_json<Json>();
    closing["noisy"] = noisy();
  }

 private:
  void print_end();

  template <class Json>
  Json host_json() const {
    return Json{{"cpu_model", cpu_model_},         {"cores", cores_},
                {"load_average_start", load_start_}, {"load_average_end", load_end_},
                {"busy_cores", busy_},               {"max_busy_cores", kMaxBusyCores}};
  }

  std::string program_, cpu_model_;
  int cores_ = 1;
  double load_start_ = -1, load_end_ = -1, busy_ = 0;
  LoadVerdict verdict_ = LoadVerdict::kQuiet;
};

/// The one-line description of --allow-load, the same in every benchmark's --help.
inline constexpr const char* kAllowLoadHelp =
    "report even when other processes kept more than 0.2 cores busy over the 2 s before the start "
    "(the JSON is marked \"noisy\": true); without it such a run exits 3";

}  // namespace kiln::bench
