// The flight recorder: a ring of the last N collectives; on real processes, a rank that skips a
// collective and a rank that calls it with another size are named by the analysis and by the
// //distributed/debug:flight_recorder tool, from dumps written on failure and on SIGUSR1.
#include <doctest/doctest.h>
#include <signal.h>

#include <cstdio>
#include <filesystem>
#include <thread>

#include "core/ops.h"
#include "distributed/debug/flight_recorder.h"
#include "distributed/debug/flight_recorder_analysis.h"
#include "distributed/backend/init.h"
#include "distributed/debug/traced_process_group.h"
#include "tests/distributed/multiprocess.h"

namespace kiln {
namespace {

using test::expect;

bool wait_for_file(const std::string& path, double seconds) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (std::filesystem::exists(path)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

std::string read_all(const std::string& path) {
  std::ifstream f(path);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

}  // namespace

TEST_CASE("the ring keeps the last N entries and reads each one's state at dump time") {
  dist::FlightRecorder rec(3);
  std::vector<dist::WorkPtr> works;
  for (uint64_t s = 1; s <= 5; ++s) {
    works.push_back(std::make_shared<dist::Work>("allreduce", s));
    rec.add({"allreduce", false, s, -1, {static_cast<int64_t>(s)}, "f32", dist::Work::Clock::now(), works.back(), ""});
  }
  works[2]->mark_started();
  works[2]->finish();
  works[3]->mark_started();
  rec.mark_failed(works[4], "boom");
  auto j = rec.to_json(0, 1, "gloo");
  REQUIRE(j["entries"].size() == 3);
  CHECK(j["entries"][0]["seq"] == 3);
  CHECK(j["entries"][0]["state"] == "completed");
  CHECK(j["entries"][1]["state"] == "started");
  CHECK(j["entries"][2]["state"] == "failed");
  CHECK(j["entries"][2]["error"] == "boom");
  CHECK(dist::FlightRecorder(0).size() == 0);
}

TEST_CASE("a rank that skips a collective and a rank that calls it with another size are named") {
  const std::string dir = test::scratch_dir("flight_dumps");
  const std::string marks = test::scratch_dir("flight_dumps_gave_up");
  auto results = test::run_ranks(
      3,
      [dir, marks](int rank, int) {
        setenv("KILN_SHM_ALLREDUCE", "0", 1);  // Gloo's TCP ring: a size mismatch fails or times out cleanly
        setenv("KILN_FLIGHT_RECORDER_DIR", dir.c_str(), 1);
        dist::InitOptions o;
        o.timeout = std::chrono::seconds(3);
        auto pg = dist::trace_process_group(dist::init_process_group(o));
        Tensor t = ones({16});
        pg->allreduce(t)->wait();  // #1: everyone, same size
        const std::string mine = fmt::format("{}/flight_recorder.rank{}.json", dir, rank);
        if (rank == 2) {  // skips #2; dumps when asked with SIGUSR1, as a stuck rank would be
          raise(SIGUSR1);
          expect(wait_for_file(mine, 10), "rank 2: no dump after SIGUSR1");
          expect(test::wait_for_gave_up(marks, {0, 1}), "rank 2: ranks 0 and 1 never gave up on #2");
          return;  // alive until the others gave up
        }
        test::GaveUp gave_up(marks, rank);
        Tensor u = ones({rank == 0 ? 8 : 12});  // #2: rank 1 with another size
        bool failed = false;
        try {
          pg->allreduce(u)->wait();
        } catch (const Error&) {
          failed = true;
        }
        expect(failed, "rank {}: allreduce #2 should have failed", rank);
        expect(std::filesystem::exists(mine), "rank {}: no dump after the failure", rank);
      },
      90, "flight_recorder");
  test::require_all_ok(results);

  dist::FlightReport report = dist::analyze_flight_records(dist::read_flight_records({dir}));
  INFO(report.text());
  bool behind = false, mismatch = false;
  for (const auto& f : report.findings) {
    if (f.kind == "behind") behind = f.seq == 2 && f.ranks == std::vector<int>{2};
    if (f.kind == "mismatch") {
      mismatch = f.seq == 2 && f.message.find("rank 0: allreduce [8] f32") != std::string::npos &&
                 f.message.find("rank 1: allreduce [12] f32") != std::string::npos;
    }
  }
  CHECK(behind);
  CHECK(mismatch);

  // The tool says the same.
  const std::string out = dir + "/tool.txt";
  int rc = std::system(("distributed/debug/flight_recorder " + dir + " > " + out + " 2>&1").c_str());
  std::string text = read_all(out);
  INFO(text);
  CHECK(WEXITSTATUS(rc) == 2);  // findings
  CHECK(text.find("rank 2 behind: never issued collective #2 (allreduce [8] f32") != std::string::npos);
  CHECK(text.find("collective #2 disagrees between ranks") != std::string::npos);
}

TEST_CASE("every group new_group makes after the default group is traced keeps its own ring") {
  const std::string dir = test::scratch_dir("flight_subgroups");
  const std::string marks = test::scratch_dir("flight_subgroups_gave_up");
  auto results = test::run_ranks(
      4,
      [dir, marks](int rank, int) {
        setenv("KILN_SHM_ALLREDUCE", "0", 1);
        setenv("KILN_FLIGHT_RECORDER_DIR", dir.c_str(), 1);
        dist::InitOptions o;
        o.timeout = std::chrono::seconds(3);
        auto world = dist::trace_process_group(dist::init_process_group(o));
        auto evens = dist::new_group({0, 2});  // group0
        auto odds = dist::new_group({1, 3});   // group1
        auto mine = rank % 2 == 0 ? evens : odds;
        auto* traced = dynamic_cast<dist::TracedProcessGroup*>(mine.get());
        expect(traced != nullptr, "rank {}: the subgroup is not traced", rank);
        expect(traced->flight_group().name == (rank % 2 == 0 ? "group0" : "group1"), "rank {}: group named {}", rank,
               traced->flight_group().name);
        Tensor t = ones({4});
        world->allreduce(t)->wait();
        mine->allreduce(t)->wait();  // #1 of each subgroup
        if (rank == 3) {  // skips group1's #2 and dumps on SIGUSR1: the world's ring and group1's
          raise(SIGUSR1);
          expect(wait_for_file(fmt::format("{}/flight_recorder.rank3.group1.json", dir), 10) &&
                     wait_for_file(fmt::format("{}/flight_recorder.rank3.json", dir), 10),
                 "rank 3: no dumps after SIGUSR1");
        } else if (rank == 1) {
          test::GaveUp gave_up(marks, rank);
          bool failed = false;
          try {
            mine->allreduce(ones({6}))->wait();
          } catch (const Error&) {
            failed = true;
          }
          expect(failed, "rank 1: group1's allreduce #2 should have failed");
          expect(std::filesystem::exists(fmt::format("{}/flight_recorder.rank1.group1.json", dir)),
                 "rank 1: no group1 dump after the failure");
          return;
        } else {
          mine->allreduce(ones({5}))->wait();  // group0's #2 completes on both members
          traced->dump_flight_recorder();
        }
        expect(test::wait_for_gave_up(marks, {1}), "rank {}: rank 1 never gave up on group1's #2", rank);
      },
      90, "flight_recorder_subgroups");
  test::require_all_ok(results);

  dist::FlightReport report = dist::analyze_flight_records(dist::read_flight_records({dir}));
  INFO(report.text());
  REQUIRE(report.findings.size() == 1);  // group0 and the world agree; group1 has rank 3 behind
  const dist::FlightFinding& f = report.findings[0];
  CHECK(f.kind == "behind");
  CHECK(f.group == "group1");
  CHECK(f.seq == 2);
  CHECK(f.ranks == std::vector<int>{3});
  CHECK(f.message.find("group1 (ranks 1, 3): rank 3 behind: never issued collective #2 (allreduce [6] f32), "
                       "which rank 1 issued") != std::string::npos);
}

TEST_CASE("the tool refuses a directory without dumps, naming it") {
  const std::string dir = test::scratch_dir("flight_empty");
  CHECK_THROWS_WITH_AS(dist::read_flight_records({dir}), doctest::Contains(dir.c_str()), Error);
}

}  // namespace kiln
