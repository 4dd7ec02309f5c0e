// Reads every rank's flight recorder dump (flight_recorder.h) and explains a hang or a failure:
// which ranks are behind and at which collective, and which collectives disagree between ranks
// in op, size or dtype (a rank that skipped a collective or called another one in its place).
// Each group (the default one, and every traced new_group) is compared on its own; ranks are
// always named by their rank in the default group.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kiln::dist {

struct FlightFinding {
  /// "behind": `ranks` never issued collective `seq`, which others did.
  /// "mismatch": at collective `seq` the ranks issued different ops/sizes/dtypes.
  /// "stuck": collective `seq` was issued by every rank but has not completed on `ranks`.
  std::string kind;
  uint64_t seq = 0;
  std::vector<int> ranks;  // ranks of the default group
  std::string message;
  std::string group = "world";  // "world", or new_group's "group<id>"
};

struct FlightReport {
  std::vector<FlightFinding> findings;
  /// Human-readable summary, one finding per line (first the ranks behind, then disagreements).
  std::string text() const;
};

/// `dumps`: one JSON document per rank and group, as FlightRecorder::to_json writes them.
FlightReport analyze_flight_records(const std::vector<nlohmann::json>& dumps);
/// Reads flight_recorder.rank*.json under `dir` (or the files named); throws naming a file that
/// does not parse; says on stderr which ranks of each group left no dump.
std::vector<nlohmann::json> read_flight_records(const std::vector<std::string>& paths_or_dir);

}  // namespace kiln::dist
