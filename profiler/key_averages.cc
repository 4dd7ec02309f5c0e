#include "profiler/key_averages.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <tuple>

namespace kiln::profiler {

std::vector<int64_t> self_times(const std::vector<Event>& events) {
  std::vector<int64_t> self(events.size());
  std::map<uint32_t, std::vector<size_t>> by_thread;
  for (size_t i = 0; i < events.size(); ++i) {
    self[i] = events[i].end_ns - events[i].start_ns;
    if (events[i].track == Track::kThread && events[i].end_ns > events[i].start_ns)
      by_thread[events[i].thread].push_back(i);
  }
  for (auto& [t, idx] : by_thread) {
    std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
      return std::tuple(events[a].start_ns, -events[a].end_ns) < std::tuple(events[b].start_ns, -events[b].end_ns);
    });
    std::vector<size_t> stack;
    for (size_t i : idx) {
      while (!stack.empty() && events[stack.back()].end_ns <= events[i].start_ns) stack.pop_back();
      if (!stack.empty() && events[i].end_ns <= events[stack.back()].end_ns)
        self[stack.back()] -= events[i].end_ns - events[i].start_ns;
      stack.push_back(i);
    }
  }
  return self;
}

KeyAverages::KeyAverages(const std::vector<Event>& events, bool group_by_shape) : by_shape_(group_by_shape) {
  std::vector<int64_t> self = self_times(events);
  std::map<std::tuple<std::string, std::string, std::string>, KeyAverage> agg;
  for (size_t i = 0; i < events.size(); ++i) {
    const Event& e = events[i];
    if (e.category == "alloc" || e.category == "free") continue;
    KeyAverage& a = agg[{e.name, e.category, group_by_shape ? e.shapes : std::string()}];
    a.name = e.name;
    a.category = e.category;
    if (group_by_shape) a.shapes = e.shapes;
    ++a.calls;
    a.total_ns += e.end_ns - e.start_ns;
    a.self_ns += self[i];
    if (e.device_ms > 0) a.device_ms += e.device_ms;
    a.bytes += e.bytes;
    a.flops += e.flops;
  }
  for (auto& [k, a] : agg) rows_.push_back(std::move(a));
  std::stable_sort(rows_.begin(), rows_.end(), [](const KeyAverage& a, const KeyAverage& b) { return a.self_ns > b.self_ns; });
}

const KeyAverage* KeyAverages::find(const std::string& name) const {
  for (const KeyAverage& r : rows_)
    if (r.name == name) return &r;
  return nullptr;
}

double KeyAverages::total_flops() const {
  double f = 0;
  for (const KeyAverage& r : rows_) f += r.flops;
  return f;
}

namespace {
std::string ms(int64_t ns) { return fmt::format("{:.3f} ms", static_cast<double>(ns) / 1e6); }
}  // namespace

std::string KeyAverages::table(size_t row_limit) const {
  int64_t self_sum = 0;
  for (const KeyAverage& r : rows_)
    if (r.category == "kernel" || r.category == "user" || r.category == "backward" || r.category == "data")
      self_sum += r.self_ns;
  const int width = by_shape_ ? 150 : 118;
  std::string out = fmt::format("{:-<{}}\n", "", width);
  out += fmt::format("{:<28}{:<12}{:>8}{:>14}{:>9}{:>14}{:>12}{:>14}{:>8}", "Name", "Category", "Calls", "Self CPU",
                     "Self %", "CPU total", "CPU avg", "Device total", "");
  out += by_shape_ ? "  Shapes\n" : "\n";
  out += fmt::format("{:-<{}}\n", "", width);
  size_t n = row_limit == 0 ? rows_.size() : std::min(row_limit, rows_.size());
  for (size_t i = 0; i < n; ++i) {
    const KeyAverage& r = rows_[i];
    bool on_thread = r.category != "collective" && r.category != "p2p";
    std::string pct = on_thread && self_sum > 0
                          ? fmt::format("{:.1f}%", 100.0 * static_cast<double>(r.self_ns) / static_cast<double>(self_sum))
                          : "-";
    out += fmt::format("{:<28}{:<12}{:>8}{:>14}{:>9}{:>14}{:>12}{:>14}{:>8}", r.name.substr(0, 27), r.category,
                       r.calls, ms(r.self_ns), pct, ms(r.total_ns), ms(r.total_ns / std::max<int64_t>(r.calls, 1)),
                       r.device_ms > 0 ? fmt::format("{:.3f} ms", r.device_ms) : "-", "");
    out += by_shape_ ? fmt::format("  {}\n", r.shapes) : "\n";
  }
  out += fmt::format("{:-<{}}\nSelf CPU time total: {}\n", "", width, ms(self_sum));
  return out;
}

std::vector<KernelClass> KeyAverages::kernel_classes() const {
  std::vector<KernelClass> c = {{.name = "GEMM"}, {.name = "attention"}, {.name = "memory-bound"}};
  for (const KeyAverage& r : rows_) {
    if (r.category != "kernel") continue;
    const bool gemm = r.name == "linear" || r.name == "bmm" || r.name == "conv2d" || r.name == "conv2d_backward";
    KernelClass& k = c[gemm ? 0 : r.name.starts_with("attention_") ? 1 : 2];
    k.calls += r.calls;
    k.self_ns += r.self_ns;
    k.device_ms += r.device_ms;
    k.flops += r.flops;
  }
  return c;
}

std::string KeyAverages::kernel_class_table() const {
  const std::vector<KernelClass> c = kernel_classes();
  const bool device = std::any_of(c.begin(), c.end(), [](const KernelClass& k) { return k.device_ms > 0; });
  auto seconds = [&](const KernelClass& k) { return device ? k.device_ms / 1e3 : static_cast<double>(k.self_ns) / 1e9; };
  double total = 0;
  for (const KernelClass& k : c) total += seconds(k);
  std::string out = fmt::format("kernel time by class ({}):\n", device ? "device time" : "self CPU time");
  for (const KernelClass& k : c) {
    const double s = seconds(k);
    out += fmt::format("  {:<13}{:>8} calls {:>12.3f} ms {:>6.1f}%", k.name, k.calls, s * 1e3,
                       total > 0 ? 100 * s / total : 0.0);
    if (k.flops > 0 && s > 0) out += fmt::format("  {:.1f} GFLOP/s of counted FLOPs", k.flops / s / 1e9);
    out += "\n";
  }
  return out;
}

KeyAverages Profiler::key_averages(bool group_by_shape) const { return KeyAverages(events_, group_by_shape); }

}  // namespace kiln::profiler
