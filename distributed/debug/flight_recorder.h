// The flight recorder: the last N collectives and transfers a process group issued (op,
// sequence number, element counts, dtype, peer, issue/start/end times, state) in a ring buffer,
// dumped as JSON (one file per rank and group) when a collective fails or times out, on SIGUSR1,
// or on request. //distributed/debug:flight_recorder reads every rank's dump and says who is behind and
// where the ranks disagree (flight_recorder_analysis.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

// Only json's declaration: this header reaches every training job, which never reads a dump
// (nlohmann/json.hpp costs 2 s per translation unit); flight_recorder.cc includes the whole.
#include <nlohmann/json_fwd.hpp>

#include "distributed/backend/process_group.h"

namespace kiln::dist {

struct FlightEntry {
  std::string op;            // "allreduce", "send", ...
  bool p2p = false;          // sends and receives are numbered apart from collectives
  uint64_t seq = 0;          // the backend's sequence number (the same on every rank for collectives)
  int peer = -1;             // root of broadcast/reduce, destination/source of send/recv
  std::vector<int64_t> numels;
  std::string dtype;
  Work::Clock::time_point issued;
  WorkPtr work;              // the backend's handle: its state and times are read at dump time
  std::string error;         // set when waiting on it threw
};

/// Which group a dump belongs to: the default group ("world"), or one made by new_group, whose
/// members are `ranks` (ranks of the default group; empty for "world": 0..size-1).
struct FlightGroup {
  std::string name = "world";
  std::vector<int> ranks;
  int global_rank(int rank) const { return ranks.empty() ? rank : ranks.at(static_cast<size_t>(rank)); }
};

class FlightRecorder {
 public:
  /// `capacity` entries at most (the oldest are dropped); capacity 0 records nothing.
  explicit FlightRecorder(size_t capacity);
  void add(FlightEntry e);
  void mark_failed(const WorkPtr& work, const std::string& error);
  size_t size() const;
  /// {"rank", "world_size", "backend", "group", "group_ranks", "global_rank", "entries": [{"op", "seq",
  /// "p2p", "peer", "numels", "dtype", "state" (scheduled|started|completed|failed), "issued_us",
  /// "started_us", "finished_us", "error"}]}; `rank` and `world_size` are the group's.
  nlohmann::json to_json(int rank, int world_size, const std::string& backend, const FlightGroup& group = {}) const;
  /// Writes to_json to `dir`/flight_recorder.rank<global rank>.json for the world, and to
  /// flight_recorder.rank<global rank>.<group>.json for a subgroup (temp name, then rename);
  /// returns the path.
  std::string dump(const std::string& dir, int rank, int world_size, const std::string& backend,
                   const FlightGroup& group = {}) const;

 private:
  size_t capacity_;
  mutable std::mutex mu_;
  std::deque<FlightEntry> entries_;
};

/// The dump directory: $KILN_FLIGHT_RECORDER_DIR, else <temp dir>/kiln_flight_recorder.
std::string flight_recorder_dir();
/// The entry capacity: $KILN_FLIGHT_RECORDER_ENTRIES, else 2000.
size_t flight_recorder_capacity();

}  // namespace kiln::dist
