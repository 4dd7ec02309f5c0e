// CUDA micro-benchmarks: elementwise and reduction GB/s (copy, cast, add, broadcast add, exp,
// strided copy, sum over all / the last dim, softmax, one fused AdamW step over 20M parameters in
// 50 tensors) as a fraction of a device-to-device cudaMemcpy's bandwidth (the roof an elementwise
// kernel can reach), and host <-> device bandwidth from pageable and pinned memory. Prints a
// table and one JSON line; without a CUDA device it says so and exits 0. --only runs just the
// rows whose name contains one of the given parts (and the memcpy roof), not the host copies.
// After timing a row, one more call of it runs between cudaProfilerStart and cudaProfilerStop:
// the call `ncu --profile-from-start off` profiles.
//   cuda_bench [--only "sum f32 (all),softmax"]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench/host_check.h"
#include "core/util/cli.h"
#include "core/kernels.h"
#include "core/ops.h"
#include "cuda/allocator.h"
#include "cuda/device.h"
#include "cuda/runtime_calls.h"
#include "cuda/stream.h"

using namespace kiln;

namespace {

/// Median-free simple timing: warm-up, then `iters` runs between two timing events.
double time_ms(const std::function<void()>& f, int iters = 20) {
  f();
  cuda::synchronize();
  cuda::Event start(true), end(true);
  start.record(cuda::current_stream(0));
  for (int i = 0; i < iters; ++i) f();
  end.record(cuda::current_stream(0));
  end.synchronize();
  return start.elapsed_ms(end) / iters;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> only;
  cli::App app("CUDA elementwise and reduction GB/s against a device-to-device copy, and host<->device GB/s.",
               "cuda_bench");
  app.add_option("--only", only, "comma-separated parts of row names: run only the rows that contain one")
      ->delimiter(',');
  bool allow_load = false;
  app.add_flag("--allow-load", allow_load, bench::kAllowLoadHelp);
  if (int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  if (cuda::device_count() == 0) {
    std::printf("skipped: no CUDA device\n{\"bench\": \"cuda_bench\", \"skipped\": \"no CUDA device\"}\n");
    return 0;
  }
  bench::HostCheck host("cuda_bench", allow_load);
  if (!host.may_report()) return bench::kLoadedExitCode;
  std::printf("device: %s\n", cuda::device_description(0).c_str());
  const Device gpu("cuda:0");
  const int64_t n = int64_t{1} << 26;  // 64 Mi elements
  Tensor a = randn({n}).to(gpu), b = randn({n}).to(gpu), row = randn({1, 8192}).to(gpu);
  Tensor a2 = a.view({n / 8192, 8192});
  Tensor out = empty({n}, dtype(kFloat32).device(gpu));
  Tensor out16 = empty({n}, dtype(kFloat16).device(gpu));
  // One fused AdamW step (kernels::adam_step, multi-tensor) over 50 f32 tensors of 400K elements:
  // reads p, g, m, v and writes p, m, v.
  const int64_t adam_tensors = 50, adam_each = 400000;
  std::vector<Tensor> ps, gs, ms, vs, no_vmax;
  for (int64_t i = 0; i < adam_tensors; ++i) {
    ps.push_back(randn({adam_each}).to(gpu));
    gs.push_back(randn({adam_each}).to(gpu));
    ms.push_back(zeros({adam_each}, dtype(kFloat32).device(gpu)));
    vs.push_back(zeros({adam_each}, dtype(kFloat32).device(gpu)));
  }
  AdamStepParams adamw;
  adamw.lr = 1e-3;
  adamw.beta1 = 0.9;
  adamw.beta2 = 0.999;
  adamw.eps = 1e-8;
  adamw.weight_decay = 1e-2;
  adamw.decoupled = true;
  adamw.step_size = adamw.lr / (1 - adamw.beta1);
  adamw.bias_corr2_sqrt = std::sqrt(1 - adamw.beta2);
  struct Row {
    std::string name;
    double bytes;
    std::function<void()> f;
  };
  const double f4 = 4.0 * n;
  std::vector<Row> rows = {
      {"cudaMemcpy d2d (roof)", 2 * f4,
       [&] {
         cuda::copy_device_bytes(out.data_ptr(), a.data_ptr(), static_cast<size_t>(f4));
       }},
      {"copy f32", 2 * f4, [&] { out.copy_(a); }},
      {"cast f32->f16", f4 + 2.0 * n, [&] { out16.copy_(a); }},
      {"add f32", 3 * f4, [&] { Tensor c = a + b; }},
      {"add f32 broadcast row", 2 * f4, [&] { Tensor c = a2 + row; }},
      {"exp f32", 2 * f4, [&] { Tensor c = a.exp(); }},
      {"transpose copy f32", 2 * f4, [&] { Tensor c = a2.transpose(0, 1).contiguous(); }},
      {"sum f32 (all)", f4, [&] { Tensor c = a.sum(); }},
      {"sum f32 (last dim)", f4, [&] { Tensor c = a2.sum({1}); }},
      {"sum f32 (first dim)", f4, [&] { Tensor c = a2.sum({0}); }},
      {"softmax f32 (rows 8192)", 2 * f4, [&] { Tensor c = a2.softmax(1); }},
      {"adamw step f32 (20M, 50 t)", 7.0 * 4 * adam_tensors * adam_each,
       [&] { kernels::adam_step[gpu](ps, gs, ms, vs, no_vmax, adamw); }},
  };
  if (!only.empty()) {  // the first row, the roof, always runs
    auto named = [](const Row& r, const std::string& part) { return r.name.find(part) != std::string::npos; };
    for (const std::string& part : only)
      if (std::none_of(rows.begin(), rows.end(), [&](const Row& r) { return named(r, part); }))
        return cli::usage_error(app, fmt::format("--only: no row's name contains '{}'", part));
    std::vector<Row> kept = {rows.front()};
    for (size_t i = 1; i < rows.size(); ++i)
      if (std::any_of(only.begin(), only.end(), [&](const std::string& part) { return named(rows[i], part); }))
        kept.push_back(rows[i]);
    rows = std::move(kept);
  }
  nlohmann::ordered_json json = {{"bench", "cuda_bench"}};
  std::printf("%-26s %10s %10s %10s\n", "op", "ms", "GB/s", "of roof");
  double roof = 0;
  for (auto& r : rows) {
    const double ms = time_ms(r.f), gbs = r.bytes / ms / 1e6;
    if (roof == 0) roof = gbs;  // the first row is the memcpy
    cuda::profiler_start();
    r.f();
    cuda::profiler_stop();
    std::printf("%-26s %10.3f %10.1f %9.0f%%\n", r.name.c_str(), ms, gbs, 100 * gbs / roof);
    json[r.name + " GB/s"] = gbs;
    json[r.name + " of roof"] = gbs / roof;
  }
  if (only.empty()) {
    Tensor host = randn({n});
    Tensor pinned = cuda::pin_memory(host);
    const double h2d = time_ms([&] { Tensor g = host.to(gpu); }, 5);
    const double h2d_pinned = time_ms([&] { Tensor g = pinned.to(gpu); }, 5);
    const double d2h = time_ms([&] { Tensor h = a.to(kCPU); }, 5);
    std::printf("%-26s %10.3f %10.1f\n", "host->device pageable", h2d, f4 / h2d / 1e6);
    std::printf("%-26s %10.3f %10.1f\n", "host->device pinned", h2d_pinned, f4 / h2d_pinned / 1e6);
    std::printf("%-26s %10.3f %10.1f\n", "device->host", d2h, f4 / d2h / 1e6);
    json["h2d pageable GB/s"] = f4 / h2d / 1e6;
    json["h2d pinned GB/s"] = f4 / h2d_pinned / 1e6;
    json["d2h GB/s"] = f4 / d2h / 1e6;
  }
  std::printf("%s\n", cuda::memory_summary(0).c_str());
  host.finish(json);
  std::printf("%s\n", json.dump().c_str());
}
