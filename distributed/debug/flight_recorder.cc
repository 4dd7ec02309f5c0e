#include "distributed/debug/flight_recorder.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "core/error.h"

namespace kiln::dist {
namespace {

int64_t us_since_epoch(Work::Clock::time_point t) {
  if (t == Work::Clock::time_point{}) return -1;
  return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
}

}  // namespace

FlightRecorder::FlightRecorder(size_t capacity) : capacity_(capacity) {}

void FlightRecorder::add(FlightEntry e) {
  if (capacity_ == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (entries_.size() == capacity_) entries_.pop_front();
  entries_.push_back(std::move(e));
}

void FlightRecorder::mark_failed(const WorkPtr& work, const std::string& error) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = entries_.rbegin(); it != entries_.rend(); ++it)
    if (it->work == work) {
      it->error = error;
      return;
    }
}

size_t FlightRecorder::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

nlohmann::json FlightRecorder::to_json(int rank, int world_size, const std::string& backend,
                                       const FlightGroup& group) const {
  nlohmann::json entries = nlohmann::json::array();
  std::lock_guard<std::mutex> lock(mu_);
  for (const FlightEntry& e : entries_) {
    Work::Clock::time_point started{}, finished{};
    bool done = e.work != nullptr && e.work->is_completed();
    if (e.work) started = e.work->started();
    if (done) finished = e.work->finished();
    std::string state = !e.error.empty()                      ? "failed"
                        : done                                ? "completed"
                        : started != Work::Clock::time_point{} ? "started"
                                                              : "scheduled";
    entries.push_back({{"op", e.op}, {"seq", e.seq}, {"p2p", e.p2p}, {"peer", e.peer}, {"numels", e.numels},
                       {"dtype", e.dtype}, {"state", state}, {"issued_us", us_since_epoch(e.issued)},
                       {"started_us", us_since_epoch(started)}, {"finished_us", us_since_epoch(finished)},
                       {"error", e.error}});
  }
  std::vector<int> members = group.ranks;
  if (members.empty())
    for (int r = 0; r < world_size; ++r) members.push_back(r);
  return {{"rank", rank},
          {"world_size", world_size},
          {"backend", backend},
          {"group", group.name},
          {"group_ranks", members},
          {"global_rank", group.global_rank(rank)},
          {"capacity", capacity_},
          {"entries", std::move(entries)}};
}

std::string FlightRecorder::dump(const std::string& dir, int rank, int world_size, const std::string& backend,
                                 const FlightGroup& group) const {
  std::filesystem::create_directories(dir);
  std::string path = group.ranks.empty() && group.name == "world"
                         ? fmt::format("{}/flight_recorder.rank{}.json", dir, rank)
                         : fmt::format("{}/flight_recorder.rank{}.{}.json", dir, group.global_rank(rank), group.name);
  std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  {
    std::ofstream f(tmp);
    KILN_CHECK(f.good(), "flight recorder: cannot write {}", tmp);
    f << to_json(rank, world_size, backend, group).dump(1) << "\n";
  }
  std::filesystem::rename(tmp, path);
  return path;
}

std::string flight_recorder_dir() {
  if (const char* d = std::getenv("KILN_FLIGHT_RECORDER_DIR"); d != nullptr && *d != '\0') return d;
  return (std::filesystem::temp_directory_path() / "kiln_flight_recorder").string();
}

size_t flight_recorder_capacity() {
  const char* n = std::getenv("KILN_FLIGHT_RECORDER_ENTRIES");
  if (n == nullptr || *n == '\0') return 2000;
  char* end = nullptr;
  long long v = std::strtoll(n, &end, 10);
  KILN_CHECK(end != n && *end == '\0' && v >= 0, "KILN_FLIGHT_RECORDER_ENTRIES: '{}' is not a count of entries", n);
  return static_cast<size_t>(v);
}

}  // namespace kiln::dist
