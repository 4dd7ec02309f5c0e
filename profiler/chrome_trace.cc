// export_chrome_trace: the Chrome trace-event format (JSON object with "traceEvents"), one
// process row per rank ("rank R"), one row per CPU thread, and the communication and data
// tracks apart. Events on a thread row nest (they come from scopes); on the other tracks
// transfers may overlap, so each goes to the first lane free at its start.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "profiler/profiler.h"

namespace kiln::profiler {
namespace {

constexpr int kTrackTidBase = 100000;  // tids of the non-thread tracks: base + 100 * track + lane

double us(int64_t ns) { return static_cast<double>(ns) / 1e3; }

}  // namespace

void Profiler::export_chrome_trace(const std::string& path) const {
  using nlohmann::json;
  const int pid = options_.rank;
  json events = json::array();
  events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"tid", 0},
                    {"args", {{"name", fmt::format("rank {}", pid)}}}});
  events.push_back({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", pid}, {"tid", 0}, {"args", {{"sort_index", pid}}}});

  std::vector<size_t> order(events_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return events_[a].start_ns < events_[b].start_ns; });

  std::map<int, std::vector<int64_t>> lane_ends;  // track -> end of the last event in each lane
  std::map<int64_t, std::string> tid_names;
  int64_t live_bytes = 0;
  for (size_t i : order) {
    const Event& e = events_[i];
    int64_t tid = e.thread;
    if (e.track == Track::kThread) {
      tid_names.emplace(tid, fmt::format("thread {}", e.thread));
    } else {
      auto& ends = lane_ends[static_cast<int>(e.track)];
      size_t lane = 0;
      while (lane < ends.size() && ends[lane] > e.start_ns) ++lane;
      if (lane == ends.size()) ends.push_back(0);
      ends[lane] = e.end_ns;
      tid = kTrackTidBase + 100 * static_cast<int64_t>(e.track) + static_cast<int64_t>(lane);
      tid_names.emplace(tid, lane == 0 ? track_name(e.track) : fmt::format("{} ({})", track_name(e.track), lane + 1));
    }
    if (e.category == "alloc" || e.category == "free") {
      live_bytes += e.bytes;
      events.push_back({{"ph", "C"}, {"name", fmt::format("memory {}", e.device)}, {"pid", pid}, {"tid", tid},
                        {"ts", us(e.start_ns)}, {"args", {{"bytes", live_bytes}}}});
      continue;
    }
    json args = json::object();
    if (!e.shapes.empty()) args["shapes"] = e.shapes;
    if (!e.dtype.empty()) args["dtype"] = e.dtype;
    if (!e.device.empty()) args["device"] = e.device;
    if (e.bytes != 0) args["bytes"] = e.bytes;
    if (e.seq >= 0) args["seq"] = e.seq;
    if (e.device_ms >= 0) args["device_ms"] = e.device_ms;
    events.push_back({{"ph", "X"}, {"name", e.name}, {"cat", e.category}, {"pid", pid}, {"tid", tid},
                      {"ts", us(e.start_ns)}, {"dur", us(std::max<int64_t>(e.end_ns - e.start_ns, 0))}, {"args", args}});
  }
  for (const auto& [tid, name] : tid_names) {
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", pid}, {"tid", tid}, {"args", {{"name", name}}}});
    events.push_back({{"ph", "M"}, {"name", "thread_sort_index"}, {"pid", pid}, {"tid", tid}, {"args", {{"sort_index", tid}}}});
  }
  json doc = {{"traceEvents", std::move(events)},
              {"displayTimeUnit", "ms"},
              {"otherData", {{"rank", pid}, {"clock", "steady_clock, origin at the ranks' aligning barrier (0 if none)"}}}};
  std::filesystem::path p(path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
  std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    KILN_CHECK(f.good(), "export_chrome_trace: cannot write {}", tmp);
    f << doc.dump();
    KILN_CHECK(f.good(), "export_chrome_trace: writing {} failed", tmp);
  }
  std::filesystem::rename(tmp, path);
}

}  // namespace kiln::profiler
