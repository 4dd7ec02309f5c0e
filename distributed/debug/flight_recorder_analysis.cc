#include "distributed/debug/flight_recorder_analysis.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "core/error.h"

namespace kiln::dist {
namespace {

struct Call {
  std::string op, dtype, state;
  std::vector<int64_t> numels;
  std::string signature() const { return fmt::format("{} {} {}", op, numels, dtype); }
};

}  // namespace

std::string FlightReport::text() const {
  if (findings.empty()) return "flight recorder: all ranks issued the same collectives, and all of them completed\n";
  std::string out;
  for (const FlightFinding& f : findings) out += f.message + "\n";
  return out;
}

namespace {

std::string group_of(const nlohmann::json& dump) { return dump.value("group", std::string("world")); }

/// The members of a dump's group, as ranks of the default group.
std::vector<int> members_of(const nlohmann::json& dump) {
  if (dump.contains("group_ranks")) return dump.at("group_ranks").get<std::vector<int>>();
  std::vector<int> all;
  for (int r = 0; r < dump.value("world_size", 0); ++r) all.push_back(r);
  return all;
}

/// One group's dumps, compared.
void analyze_group(const std::vector<const nlohmann::json*>& dumps, FlightReport& report) {
  const size_t first_finding = report.findings.size();
  std::map<int, std::map<uint64_t, Call>> calls;  // global rank -> seq -> call (collectives only)
  for (const nlohmann::json* dump : dumps) {
    const nlohmann::json& d = *dump;
    int rank = d.value("global_rank", d.at("rank").get<int>());
    auto& mine = calls[rank];
    for (const auto& e : d.at("entries")) {
      if (e.at("p2p").get<bool>()) continue;
      mine[e.at("seq").get<uint64_t>()] =
          Call{e.at("op"), e.at("dtype"), e.at("state"), e.at("numels").get<std::vector<int64_t>>()};
    }
  }
  if (calls.empty()) return;
  // Compare only where every rank's ring still holds entries: from the latest first entry on.
  uint64_t lo = 0, hi = 0;
  for (const auto& [rank, m] : calls) {
    if (!m.empty()) lo = std::max(lo, m.begin()->first);
    if (!m.empty()) hi = std::max(hi, m.rbegin()->first);
  }
  auto last = [](const std::map<uint64_t, Call>& m) { return m.empty() ? uint64_t{0} : m.rbegin()->first; };

  // Behind: ranks whose last collective comes before the furthest rank's.
  std::map<uint64_t, std::vector<int>> behind_at;  // the first collective they never issued -> ranks
  for (const auto& [rank, m] : calls)
    if (last(m) < hi) behind_at[last(m) + 1].push_back(rank);
  for (const auto& [seq, ranks] : behind_at) {
    std::vector<int> reached;
    std::string what;
    for (const auto& [rank, m] : calls)
      if (auto it = m.find(seq); it != m.end()) {
        reached.push_back(rank);
        if (what.empty()) what = it->second.signature();
      }
    report.findings.push_back({"behind", seq, ranks,
                               fmt::format("rank{} {} behind: never issued collective #{} ({}), which rank{} {} issued",
                                           ranks.size() > 1 ? "s" : "", fmt::join(ranks, ", "), seq, what,
                                           reached.size() > 1 ? "s" : "", fmt::join(reached, ", "))});
  }

  // Disagreements: the same sequence number, different op, sizes or dtype.
  for (uint64_t seq = lo; seq <= hi; ++seq) {
    std::map<std::string, std::vector<int>> by_sig;
    for (const auto& [rank, m] : calls)
      if (auto it = m.find(seq); it != m.end()) by_sig[it->second.signature()].push_back(rank);
    if (by_sig.size() <= 1) continue;
    std::vector<std::string> parts;
    std::vector<int> odd;
    // The odd ones out: ranks outside the largest group (everyone when no group is largest).
    size_t majority = 0, groups_at_majority = 0;
    for (const auto& [sig, ranks] : by_sig) majority = std::max(majority, ranks.size());
    for (const auto& [sig, ranks] : by_sig) groups_at_majority += ranks.size() == majority;
    for (const auto& [sig, ranks] : by_sig) {
      parts.push_back(fmt::format("rank{} {}: {}", ranks.size() > 1 ? "s" : "", fmt::join(ranks, ", "), sig));
      if (ranks.size() < majority || groups_at_majority > 1) odd.insert(odd.end(), ranks.begin(), ranks.end());
    }
    report.findings.push_back({"mismatch", seq, odd,
                               fmt::format("collective #{} disagrees between ranks: {}", seq, fmt::join(parts, "; "))});
  }

  // Stuck: issued everywhere, not completed somewhere (the first such collective).
  for (uint64_t seq = lo; seq <= hi; ++seq) {
    std::vector<int> pending;
    bool everywhere = true;
    for (const auto& [rank, m] : calls) {
      auto it = m.find(seq);
      if (it == m.end()) { everywhere = false; break; }
      if (it->second.state != "completed") pending.push_back(rank);
    }
    if (!everywhere || pending.empty()) continue;
    report.findings.push_back({"stuck", seq, pending,
                               fmt::format("collective #{} was issued by every rank but has not completed on rank{} {}",
                                           seq, pending.size() > 1 ? "s" : "", fmt::join(pending, ", "))});
    break;
  }
  // A subgroup's findings say which group (sequence numbers count per group).
  const std::string group = group_of(*dumps.front());
  for (size_t i = first_finding; i < report.findings.size(); ++i) {
    FlightFinding& f = report.findings[i];
    f.group = group;
    if (group != "world")
      f.message = fmt::format("{} (ranks {}): {}", group, fmt::join(members_of(*dumps.front()), ", "), f.message);
  }
}

}  // namespace

FlightReport analyze_flight_records(const std::vector<nlohmann::json>& dumps) {
  FlightReport report;
  std::map<std::string, std::vector<const nlohmann::json*>> by_group;
  for (const auto& d : dumps) by_group[group_of(d)].push_back(&d);
  // The default group first: a rank behind there explains most of what its subgroups show.
  if (auto it = by_group.find("world"); it != by_group.end()) analyze_group(it->second, report);
  for (const auto& [group, of_group] : by_group)
    if (group != "world") analyze_group(of_group, report);
  return report;
}

std::vector<nlohmann::json> read_flight_records(const std::vector<std::string>& paths_or_dir) {
  std::vector<std::string> paths;
  for (const std::string& p : paths_or_dir) {
    if (std::filesystem::is_directory(p)) {
      for (const auto& entry : std::filesystem::directory_iterator(p)) {
        std::string name = entry.path().filename().string();
        if (name.rfind("flight_recorder.rank", 0) == 0 && entry.path().extension() == ".json")
          paths.push_back(entry.path().string());
      }
    } else {
      paths.push_back(p);
    }
  }
  KILN_CHECK(!paths.empty(), "flight_recorder: no flight_recorder.rank*.json dumps in {}", fmt::join(paths_or_dir, ", "));
  std::sort(paths.begin(), paths.end());
  std::vector<nlohmann::json> dumps;
  std::map<std::string, std::set<int>> dumped;  // group -> global ranks with a dump
  std::map<std::string, std::vector<int>> members;
  for (const std::string& p : paths) {
    std::ifstream f(p);
    KILN_CHECK(f.good(), "flight_recorder: cannot read {}", p);
    nlohmann::json d = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
    KILN_CHECK(!d.is_discarded() && d.contains("rank") && d.contains("entries"),
               "flight_recorder: {} is not a flight recorder dump", p);
    dumped[group_of(d)].insert(d.value("global_rank", d["rank"].get<int>()));
    members[group_of(d)] = members_of(d);
    dumps.push_back(std::move(d));
  }
  for (const auto& [group, expected] : members) {
    std::vector<int> missing;
    for (int r : expected)
      if (!dumped[group].count(r)) missing.push_back(r);
    if (!missing.empty())
      std::fprintf(stderr, "flight_recorder: %s: no dump from rank%s %s (dead before it could write one?)\n",
                   group.c_str(), missing.size() > 1 ? "s" : "", fmt::format("{}", fmt::join(missing, ", ")).c_str());
  }
  return dumps;
}

}  // namespace kiln::dist
