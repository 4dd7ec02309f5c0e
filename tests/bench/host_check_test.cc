// The benchmarks' host check (bench/host_check.h) on fixed /proc text: the busy cores between two
// /proc/stat samples, the refusal above 0.2 busy cores unless --allow-load, the CPU model and the
// load average.
#include <doctest/doctest.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "bench/host_check.h"

namespace kiln::bench {
namespace {

// Two CPUs; fields: user nice system idle iowait irq softirq steal guest guest_nice.
const char* kStatBefore =
    "cpu  1000 10 300 50000 200 5 15 20 400 0\n"
    "cpu0 500 5 150 25000 100 3 7 10 200 0\n"
    "cpu1 500 5 150 25000 100 2 8 10 200 0\n"
    "intr 123456 0 0\n"
    "ctxt 987654\n"
    "btime 1700000000\n"
    "processes 4242\n"
    "procs_running 1\n";

TEST_CASE("parse_proc_stat sums the aggregate line: busy without idle, iowait and guest") {
  const CpuJiffies j = parse_proc_stat(kStatBefore);
  CHECK(j.busy == 1000 + 10 + 300 + 5 + 15 + 20);  // guest (400) is already inside user
  CHECK(j.total == j.busy + 50000 + 200);
  CHECK(count_cpus(kStatBefore) == 2);
}

TEST_CASE("parse_proc_stat takes old kernels' short lines and refuses text without the line") {
  const CpuJiffies j = parse_proc_stat("cpu 10 0 5 100\ncpu0 10 0 5 100\n");
  CHECK(j.busy == 15);
  CHECK(j.total == 115);
  CHECK_THROWS_AS(parse_proc_stat("cpu0 1 2 3 4\nintr 5\n"), std::runtime_error);
  CHECK_THROWS_AS(parse_proc_stat("cpu  1 2\n"), std::runtime_error);
  CHECK_THROWS_AS(parse_proc_stat(""), std::runtime_error);
  CHECK(count_cpus("") == 1);
}

TEST_CASE("busy_cores: the busy share of the jiffies that passed, times the CPUs") {
  const CpuJiffies before = parse_proc_stat(kStatBefore);
  // 2 s on 2 CPUs at 100 Hz: 400 jiffies; others busy for 150 of them (user 120, system 20,
  // softirq 10): 150 / 400 * 2 = 0.75 cores.
  const CpuJiffies after = parse_proc_stat(
      "cpu  1120 10 320 50250 200 5 25 20 400 0\n"
      "cpu0 560 5 160 25125 100 3 12 10 200 0\n"
      "cpu1 560 5 160 25125 100 2 13 10 200 0\n");
  CHECK(busy_cores(before, after, 2) == doctest::Approx(0.75));
  // A quiet machine: only idle (and iowait, which is idle too) advanced.
  const CpuJiffies quiet{before.busy, before.total + 400};
  CHECK(busy_cores(before, quiet, 2) == 0.0);
  // No time passed (or the counters went back): nothing busy, no division by zero.
  CHECK(busy_cores(before, before, 2) == 0.0);
  CHECK(busy_cores(after, before, 2) == 0.0);
  // One of 16 cores fully busy.
  CHECK(busy_cores({0, 0}, {200, 3200}, 16) == doctest::Approx(1.0));
}

TEST_CASE("judge_load refuses above 0.2 busy cores unless --allow-load, which marks the run noisy") {
  CHECK(judge_load(0.0, false) == LoadVerdict::kQuiet);
  CHECK(judge_load(0.2, false) == LoadVerdict::kQuiet);  // at the limit: still quiet
  CHECK(judge_load(0.21, false) == LoadVerdict::kRefused);
  CHECK(judge_load(0.21, true) == LoadVerdict::kNoisy);
  CHECK(judge_load(0.05, true) == LoadVerdict::kQuiet);  // --allow-load on a quiet machine: not noisy
  CHECK(judge_load(1.5, false, 2.0) == LoadVerdict::kQuiet);
  // /proc/stat unreadable: the load is unknown, so not quiet.
  CHECK(judge_load(std::nan(""), false) == LoadVerdict::kRefused);
  CHECK(judge_load(std::nan(""), true) == LoadVerdict::kNoisy);
}

TEST_CASE("parse_cpu_model reads the first model name, its spaces collapsed") {
  const char* x86 =
      "processor\t: 0\n"
      "vendor_id\t: AuthenticAMD\n"
      "cpu family\t: 25\n"
      "model\t\t: 1\n"
      "model name\t: AMD EPYC 7B13   64-Core Processor\n"
      "\n"
      "processor\t: 1\n"
      "model name\t: something else\n";
  CHECK(parse_cpu_model(x86) == "AMD EPYC 7B13 64-Core Processor");
  CHECK(parse_cpu_model("processor\t: 0\nProcessor\t: ARMv7 Processor rev 4 (v7l)\n") ==
        "ARMv7 Processor rev 4 (v7l)");
  CHECK(parse_cpu_model("processor\t: 0\nBogoMIPS\t: 50.00\n") == "unknown CPU");
  CHECK(parse_cpu_model("model name\t:\n") == "unknown CPU");
  CHECK(parse_cpu_model("") == "unknown CPU");
}

TEST_CASE("parse_loadavg reads the 1-minute figure") {
  CHECK(parse_loadavg("1.71 1.45 1.36 6/278 16891\n") == doctest::Approx(1.71));
  CHECK(parse_loadavg("0.00 0.01 0.05 1/100 1\n") == 0.0);
  CHECK(parse_loadavg("") == -1.0);
}

TEST_CASE("HostCheck: a real sample prints, judges and fills the closing JSON") {
  // Whatever the machine's load: with --allow-load it never refuses, and the JSON carries it.
  HostCheck host("host_check_test", /*allow_load=*/true, /*sample_s=*/0.05);
  CHECK(host.may_report());
  CHECK(host.noisy() == (host.busy_cores() > kMaxBusyCores));
  nlohmann::json closing = {{"bench", "test"}};
  host.finish(closing);
  CHECK(closing["noisy"] == host.noisy());
  CHECK(closing["host"]["cores"].get<int>() >= 1);
  CHECK(!closing["host"]["cpu_model"].get<std::string>().empty());
  CHECK(closing["host"]["max_busy_cores"] == kMaxBusyCores);
  CHECK(closing["host"]["load_average_end"].get<double>() >= 0);
}

}  // namespace
}  // namespace kiln::bench
