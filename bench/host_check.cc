#include "bench/host_check.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include <fmt/format.h>

namespace kiln::bench {
namespace {

/// The lines of `text` (without their newlines).
std::vector<std::string_view> lines_of(std::string_view text) {
  std::vector<std::string_view> out;
  while (!text.empty()) {
    const size_t end = text.find('\n');
    out.push_back(text.substr(0, end));
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  return out;
}

/// `s` without leading and trailing blanks, inner runs of blanks as one space.
std::string collapse_spaces(std::string_view s) {
  std::string out;
  for (char c : s) {
    const bool blank = c == ' ' || c == '\t';
    if (blank && (out.empty() || out.back() == ' ')) continue;
    out += blank ? ' ' : c;
  }
  if (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

/// The value of a "key<blanks>: value" line of /proc/cpuinfo when its key is `key`.
bool cpuinfo_value(std::string_view line, std::string_view key, std::string* value) {
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos || collapse_spaces(line.substr(0, colon)) != key) return false;
  *value = collapse_spaces(line.substr(colon + 1));
  return !value->empty();
}

}  // namespace

CpuJiffies parse_proc_stat(std::string_view proc_stat) {
  for (std::string_view line : lines_of(proc_stat)) {
    if (line.substr(0, 4) != "cpu ") continue;
    std::istringstream fields{std::string(line.substr(4))};
    // user nice system idle iowait irq softirq steal (guest and guest_nice are inside user, nice).
    std::vector<uint64_t> v;
    uint64_t x = 0;
    while (v.size() < 8 && fields >> x) v.push_back(x);
    if (v.size() < 4)
      throw std::runtime_error(fmt::format("/proc/stat: the \"cpu\" line has {} fields, want at least 4: '{}'",
                                           v.size(), line));
    v.resize(8, 0);
    const uint64_t busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
    return {busy, busy + v[3] + v[4]};
  }
  throw std::runtime_error("/proc/stat: no aggregate \"cpu\" line");
}

int count_cpus(std::string_view proc_stat) {
  int n = 0;
  for (std::string_view line : lines_of(proc_stat))
    if (line.size() > 3 && line.substr(0, 3) == "cpu" && line[3] >= '0' && line[3] <= '9') ++n;
  return std::max(n, 1);
}

std::string parse_cpu_model(std::string_view cpuinfo) {
  std::string value;
  for (std::string_view key : {"model name", "Processor", "cpu model"})
    for (std::string_view line : lines_of(cpuinfo))
      if (cpuinfo_value(line, key, &value)) return value;
  return "unknown CPU";
}

double parse_loadavg(std::string_view loadavg) {
  std::istringstream in{std::string(loadavg)};
  double one = -1;
  if (!(in >> one)) return -1;
  return one;
}

double busy_cores(CpuJiffies before, CpuJiffies after, int cpus) {
  if (after.total <= before.total) return 0;
  const double busy = after.busy >= before.busy ? static_cast<double>(after.busy - before.busy) : 0.0;
  return busy / static_cast<double>(after.total - before.total) * cpus;
}

LoadVerdict judge_load(double busy, bool allow_load, double max_busy_cores) {
  if (busy <= max_busy_cores) return LoadVerdict::kQuiet;  // NaN (unreadable /proc/stat) is not quiet
  return allow_load ? LoadVerdict::kNoisy : LoadVerdict::kRefused;
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return "";
  std::ostringstream text;
  text << in.rdbuf();  // /proc files report size 0: read to the end, not by size
  return text.str();
}

HostCheck::HostCheck(std::string program, bool allow_load, double sample_s) : program_(std::move(program)) {
  cpu_model_ = parse_cpu_model(read_text_file("/proc/cpuinfo"));
  load_start_ = parse_loadavg(read_text_file("/proc/loadavg"));
  std::string why_unknown;
  try {
    const std::string first = read_text_file("/proc/stat");
    cores_ = count_cpus(first);
    const CpuJiffies before = parse_proc_stat(first);
    // This process only sleeps here: every busy jiffy of the window is another process's.
    std::this_thread::sleep_for(std::chrono::duration<double>(sample_s));
    busy_ = bench::busy_cores(before, parse_proc_stat(read_text_file("/proc/stat")), cores_);
  } catch (const std::exception& e) {
    busy_ = std::nan("");
    why_unknown = e.what();
  }
  verdict_ = judge_load(busy_, allow_load);
  const std::string busy_text =
      std::isnan(busy_) ? fmt::format("the busy cores are unknown ({})", why_unknown)
                        : fmt::format("other processes kept {:.2f} cores busy over {:g} s", busy_, sample_s);
  fmt::print("host: {}, {} cores, load average {:.2f}; {}\n", cpu_model_, cores_, load_start_, busy_text);
  if (verdict_ == LoadVerdict::kNoisy)
    fmt::print("host: more than {} busy cores: reporting anyway (--allow-load), the result is marked noisy\n",
               kMaxBusyCores);
  std::fflush(stdout);
  if (verdict_ == LoadVerdict::kRefused)
    fmt::print(stderr,
               "{}: {} (more than {} allowed): refusing to report figures from a loaded machine; run it when the "
               "machine is quiet, or pass --allow-load to report them marked \"noisy\"\n",
               program_, busy_text, kMaxBusyCores);
}

void HostCheck::print_end() {
  load_end_ = parse_loadavg(read_text_file("/proc/loadavg"));
  fmt::print("host: {}, {} cores, load average {:.2f} at the end ({:.2f} at the start){}\n", cpu_model_, cores_,
             load_end_, load_start_, noisy() ? "; noisy: the machine was loaded at the start" : "");
  std::fflush(stdout);
}

}  // namespace kiln::bench
