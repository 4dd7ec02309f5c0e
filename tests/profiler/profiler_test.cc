// The profiler on one process: kernels, backward nodes and user ranges are recorded with their
// shapes; nothing is recorded (and the kernel table is untouched) when it is off; the table
// aggregates calls; the Chrome trace parses and nests; memory counting and OOM snapshots.
#include <doctest/doctest.h>

#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "autograd/autograd.h"
#include "core/allocator.h"
#include "core/kernels.h"
#include "core/op_table.h"
#include "core/ops.h"
#include "profiler/key_averages.h"
#include "profiler/memory.h"
#include "profiler/profiler.h"
#include "profiler/schedule.h"
#include "profiler/tensorboard.h"
#include "tests/file_util.h"

using namespace kiln;

namespace {

Tensor small_step() {
  Tensor w = randn({8, 4}).requires_grad_(true);
  Tensor x = randn({16, 4});
  Tensor loss = matmul(x, w.t()).relu().sum();
  loss.backward();
  return w;
}

int count(const std::vector<profiler::Event>& ev, const std::string& cat) {
  int n = 0;
  for (const auto& e : ev) n += e.category == cat;
  return n;
}

}  // namespace

TEST_CASE("off: the kernel table holds the backends' own kernels and nothing is recorded") {
  auto before = kernels::binary[kCPU];
  profiler::Profiler prof;
  prof.start();
  CHECK((kernels::binary[kCPU] != before));  // a trampoline while recording
  prof.stop();
  CHECK((kernels::binary[kCPU] == before));
  {
    profiler::RecordFunction r("outside");
    (randn({4}) + 1.0).sum();
  }
  CHECK(!profiler::is_recording());
  CHECK(prof.events().empty());  // nothing ran between start and stop; "outside" came after
}

TEST_CASE("kernels, backward nodes and user ranges are recorded with shapes and nest") {
  profiler::Profiler prof({.record_shapes = true});
  prof.start();
  {
    profiler::RecordFunction step("train_step");
    small_step();
  }
  prof.stop();
  const auto& ev = prof.events();
  CHECK(count(ev, "kernel") > 3);
  CHECK(count(ev, "backward") >= 2);
  bool linear_or_bmm = false;
  const profiler::Event* step = nullptr;
  for (const auto& e : ev) {
    CHECK(e.end_ns >= e.start_ns);
    if (e.name == "train_step") step = &e;
    if (e.category == "kernel" && (e.name == "bmm" || e.name == "linear")) {
      // the forward's x [16, 4] (as a batch of one), among the shapes of some matmul
      linear_or_bmm |= e.shapes.find("16, 4]") != std::string::npos;
      CHECK(e.dtype == "f32");
      CHECK(e.device == "cpu");
    }
  }
  CHECK(linear_or_bmm);
  REQUIRE(step != nullptr);
  for (const auto& e : ev)  // every kernel of this thread lies inside the user range
    if (e.category == "kernel" && e.thread == step->thread) {
      CHECK(e.start_ns >= step->start_ns);
      CHECK(e.end_ns <= step->end_ns);
    }

  profiler::KeyAverages avg = prof.key_averages();
  const profiler::KeyAverage* row = avg.find("train_step");
  REQUIRE(row != nullptr);
  CHECK(row->calls == 1);
  CHECK(row->self_ns < row->total_ns);  // the kernels inside are not its own time
  std::string table = avg.table();
  CHECK(table.find("train_step") != std::string::npos);
  CHECK(table.find("Self CPU time total") != std::string::npos);
  for (size_t i = 1; i < avg.rows().size(); ++i) CHECK(avg.rows()[i - 1].self_ns >= avg.rows()[i].self_ns);
}

TEST_CASE("calls are counted per op") {
  profiler::Profiler prof;
  prof.start();
  Tensor a = randn({32});
  for (int i = 0; i < 7; ++i) a = a.exp().neg();
  prof.stop();
  const profiler::KeyAverage* u = prof.key_averages().find("unary");
  REQUIRE(u != nullptr);
  CHECK(u->calls == 14);
}

TEST_CASE("GEMM-like kernels carry their FLOPs") {
  NoGradGuard no_grad;
  profiler::Profiler prof;
  prof.start();
  matmul(randn({16, 32}), randn({32, 8}));  // 2 * 16 * 32 * 8
  prof.stop();
  CHECK(prof.key_averages().total_flops() == doctest::Approx(2.0 * 16 * 32 * 8));
}

TEST_CASE("fused attention is a kernel of the table: timed, with the FLOPs of q k^T and p v") {
  NoGradGuard no_grad;
  Tensor q = randn({2, 3, 5, 4}), k = randn({2, 3, 7, 4}), v = randn({2, 3, 7, 6});
  profiler::Profiler prof;
  prof.start();
  op::attention(q, k, v, Tensor(), AttentionParams{.scale = 0.5});
  prof.stop();
  const profiler::KeyAverage* a = prof.key_averages().find("attention_forward");
  REQUIRE(a != nullptr);
  CHECK(a->calls == 1);
  // 2 * B * H * Tq * Tk * (D + Dv)
  CHECK(prof.key_averages().total_flops() == doctest::Approx(2.0 * 2 * 3 * 5 * 7 * (4 + 6)));
}

TEST_CASE("kernel classes: GEMM, attention and memory-bound time are summed apart") {
  // Recorded kernels of a transformer-like step: each lands in its class, nothing else does.
  NoGradGuard no_grad;
  Tensor q = randn({1, 2, 8, 4});
  profiler::Profiler prof;
  prof.start();
  Tensor y = matmul(randn({4, 16}), randn({16, 8}));
  op::attention(q, q, q, Tensor(), AttentionParams{.scale = 0.5});
  y.exp().sum();
  prof.stop();
  const profiler::KeyAverages avg = prof.key_averages();
  std::vector<profiler::KernelClass> c = avg.kernel_classes();
  REQUIRE(c.size() == 3);
  CHECK(c[0].name == "GEMM");
  CHECK(c[0].calls == 1);
  CHECK(c[0].flops == doctest::Approx(2.0 * 4 * 16 * 8));
  CHECK(c[1].name == "attention");
  CHECK(c[1].calls == 1);
  CHECK(c[2].name == "memory-bound");
  CHECK(c[2].calls >= 4);  // two random fills, exp, sum
  int64_t kernel_ns = 0;
  for (const profiler::KeyAverage& r : avg.rows())
    if (r.category == "kernel") kernel_ns += r.self_ns;
  CHECK(c[0].self_ns + c[1].self_ns + c[2].self_ns == kernel_ns);
  const std::string t = avg.kernel_class_table();
  CHECK(t.find("GEMM") != std::string::npos);
  CHECK(t.find("memory-bound") != std::string::npos);
  CHECK(t.find("self CPU time") != std::string::npos);
}

TEST_CASE("the Chrome trace is valid JSON whose thread events nest and name the rank") {
  profiler::Profiler prof({.record_shapes = true, .rank = 3});
  prof.start();
  {
    profiler::RecordFunction r("outer");
    small_step();
  }
  prof.stop();
  std::string path = test::scratch_dir("chrome_trace") + "/trace.rank3.json";
  prof.export_chrome_trace(path);
  auto doc = nlohmann::json::parse(std::ifstream(path));
  bool named = false;
  std::map<int64_t, std::vector<std::pair<double, double>>> by_tid;
  for (const auto& e : doc["traceEvents"]) {
    CHECK(e["pid"] == 3);
    if (e["ph"] == "M" && e["name"] == "process_name") named = e["args"]["name"] == "rank 3";
    if (e["ph"] != "X") continue;
    CHECK(e["dur"].get<double>() >= 0);
    by_tid[e["tid"].get<int64_t>()].push_back({e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>()});
  }
  CHECK(named);
  for (auto& [tid, spans] : by_tid) {  // sorted by start, any two intervals are disjoint or nested
    std::sort(spans.begin(), spans.end(), [](auto a, auto b) { return a.first < b.first || (a.first == b.first && a.second > b.second); });
    std::vector<double> open;
    for (auto [s, e] : spans) {
      while (!open.empty() && open.back() <= s) open.pop_back();
      if (!open.empty()) CHECK(e <= open.back() + 1e-3);
      open.push_back(e);
    }
  }
}

TEST_CASE("a second profiler cannot start while one records") {
  profiler::Profiler a, b;
  a.start();
  CHECK_THROWS_WITH_AS(b.start(), doctest::Contains("already recording"), Error);
  a.stop();
}

TEST_CASE("schedule: wait, warmup, active, repeat") {
  profiler::Schedule s{.wait = 1, .warmup = 1, .active = 2, .repeat = 2};
  using A = profiler::ProfilerAction;
  std::vector<A> want = {A::kNone, A::kWarmup, A::kRecord, A::kRecordAndSave,
                         A::kNone, A::kWarmup, A::kRecord, A::kRecordAndSave, A::kNone};
  for (size_t i = 0; i < want.size(); ++i) CHECK(s.at(static_cast<int64_t>(i)) == want[i]);
}

TEST_CASE("memory: counters track current and peak; an OOM writes a snapshot by op") {
  profiler::track_memory();
  profiler::reset_peak(DeviceType::CPU);
  auto base = profiler::memory_counters(DeviceType::CPU);
  {
    Tensor big = empty({1 << 20});  // 4 MiB
    auto c = profiler::memory_counters(DeviceType::CPU);
    CHECK(c.allocated - base.allocated >= 4 << 20);
    CHECK(c.peak >= c.allocated);
  }
  auto after = profiler::memory_counters(DeviceType::CPU);
  CHECK(after.allocated == base.allocated);
  CHECK(after.peak - base.allocated >= 4 << 20);
  CHECK(profiler::memory_summary().find("cpu allocated") != std::string::npos);

  std::string dir = test::scratch_dir("oom");
  profiler::set_oom_snapshot_dir(dir);
  profiler::Profiler prof;
  prof.start();
  Tensor keep;
  {
    profiler::RecordFunction r("make_keep");  // allocations are tagged with the innermost scope
    keep = randn({1000}).exp();
  }
  std::string message;
  try {
    Tensor huge = empty({int64_t{1} << 60});
  } catch (const Error& e) {
    message = e.what();
  }
  prof.stop();
  REQUIRE(message.find("written to ") != std::string::npos);
  std::string path = message.substr(message.find("written to ") + 11);
  path = path.substr(0, path.find(')'));
  std::ifstream f(path);
  REQUIRE(f.good());
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  CHECK(text.find("by op") != std::string::npos);
  CHECK(text.find("make_keep") != std::string::npos);
  CHECK(text.find("by size") != std::string::npos);
}

TEST_CASE("CRC-32C and its TFRecord mask match the published check values") {
  CHECK(profiler::crc32c("123456789", 9) == 0xE3069283u);  // RFC 3720 B.4 / the CRC catalogue
  const char zeros[32] = {};
  CHECK(profiler::crc32c(zeros, 32) == 0x8A9136AAu);       // RFC 3720 B.4: 32 bytes of zeros
  uint32_t c = 0xE3069283u;
  CHECK(profiler::masked_crc32c("123456789", 9) == ((c >> 15) | (c << 17)) + 0xa282ead8u);
}

TEST_CASE("SummaryWriter refuses a log directory it cannot create, naming it") {
  std::string file = test::scratch_dir("tb_bad") + "/plain_file";
  std::ofstream(file) << "x";
  CHECK_THROWS_WITH_AS(profiler::SummaryWriter(file + "/sub"), doctest::Contains("plain_file/sub"), Error);
}
