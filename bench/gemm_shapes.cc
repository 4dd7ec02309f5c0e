// f32 GEMM GFLOP/s at the shapes Kiln's models run, through the public `matmul` on the views
// autograd hands it: for each Linear of the GPT (batch 4 x 256 tokens, d6 and d12) and the
// MNIST CNN (batch 64), the forward product x @ W^T, the input gradient dY @ W and the weight
// gradient dY^T @ x; for each conv of the CNN, im2col's per-image W @ col. bench/gemm_shapes.py
// runs torch.matmul on the same table (`--list` prints it) beside it and reports the ratios.
// Each figure is the median of interleaved rounds after a warm-up. The last line is JSON.
//   gemm_shapes [--threads N] [--budget-s S] [--list] [--allow-load]
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench/host_check.h"
#include "bench/timing.h"
#include "core/cpu/gemm.h"
#include "core/util/cli.h"
#include "core/ops.h"
#include "core/parallel.h"

using namespace kiln;

namespace {

/// One product c[M, N] = a[M, K] @ b[K, N]; `a_t`/`b_t`: the operand is the transpose of a
/// contiguous matrix (a view, as autograd passes W^T and dY^T).
struct GemmShape {
  std::string name;
  int64_t m, k, n;
  bool a_t, b_t;
};

/// The three products of a Linear(in -> out) over `rows` inputs.
void add_linear(std::vector<GemmShape>& out, const std::string& name, int64_t rows, int64_t in, int64_t out_f) {
  out.push_back({name + ".fwd", rows, in, out_f, false, true});   // x @ W^T
  out.push_back({name + ".dx", rows, out_f, in, false, false});  // dY @ W
  out.push_back({name + ".dw", out_f, rows, in, true, false});   // dY^T @ x
}

std::vector<GemmShape> shape_table() {
  std::vector<GemmShape> s;
  const int64_t tokens = 4 * 256;
  for (auto [model, c] : {std::pair{"d6", int64_t{384}}, std::pair{"d12", int64_t{768}}}) {
    const std::string m = model;
    add_linear(s, m + ".qkv", tokens, c, 3 * c);
    add_linear(s, m + ".attn_proj", tokens, c, c);
    add_linear(s, m + ".fc", tokens, c, 4 * c);
    add_linear(s, m + ".mlp_proj", tokens, 4 * c, c);
    add_linear(s, m + ".lm_head", tokens, c, 256);
  }
  // The CNN: conv GEMMs per image (W[Cout, Cin*9] @ col[Cin*9, H*W]), then its two Linears.
  s.push_back({"cnn.conv1", 32, 9, 28 * 28, false, false});
  s.push_back({"cnn.conv2", 64, 32 * 9, 14 * 14, false, false});
  add_linear(s, "cnn.fc1", 64, 64 * 7 * 7, 128);
  add_linear(s, "cnn.fc2", 64, 128, 10);
  return s;
}

/// A [rows, cols] operand: contiguous, or the transposed view of a contiguous [cols, rows].
Tensor operand(int64_t rows, int64_t cols, bool transposed) {
  return transposed ? randn({cols, rows}).transpose(0, 1) : randn({rows, cols});
}

}  // namespace

int main(int argc, char** argv) {
  int threads = get_num_threads();
  double budget_s = 0.5;
  bool list = false, allow_load = false;
  cli::App app("f32 GEMM GFLOP/s of matmul at the GPT's and the CNN's shapes.", "gemm_shapes");
  app.add_option("--threads", threads, "intra-op threads")->check(cli::range<int>(1, 1024));
  app.add_option("--budget-s", budget_s, "seconds of timing per shape")->check(cli::range<double>(0.01, 60.0));
  app.add_flag("--list", list, "print the shape table as JSON and exit");
  app.add_flag("--allow-load", allow_load, bench::kAllowLoadHelp);
  if (int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  const std::vector<GemmShape> shapes = shape_table();
  if (list) {
    nlohmann::json rows = nlohmann::json::array();
    for (const GemmShape& s : shapes)
      rows.push_back({{"name", s.name}, {"m", s.m}, {"k", s.k}, {"n", s.n}, {"a_t", s.a_t}, {"b_t", s.b_t}});
    fmt::print("{}\n", rows.dump());
    return 0;
  }
  set_num_threads(threads);
  bench::HostCheck host("gemm_shapes", allow_load);
  if (!host.may_report()) return bench::kLoadedExitCode;
  const std::string library = cpu::sgemm_library();
  fmt::print("matmul f32 at model shapes, {} threads (GFLOP/s, median of rounds); GEMM: Eigen ({}){}\n",
             get_num_threads(), cpu::sgemm_isa(), library.empty() ? "" : ", large products " + library);
  fmt::print("{:<18} {:>22} {:>10}\n", "product", "M x K @ K x N", "GFLOP/s");
  nlohmann::ordered_json gflops;
  for (const GemmShape& s : shapes) {
    const Tensor a = operand(s.m, s.k, s.a_t), b = operand(s.k, s.n, s.b_t);
    Tensor keep;
    const double g = 2.0 * s.m * s.k * s.n / bench::time_median([&] { keep = matmul(a, b); }, budget_s, 7, 2000) * 1e-9;
    fmt::print("{:<18} {:>22} {:>10.1f}\n", s.name, fmt::format("{}x{}{} @ {}x{}{}", s.m, s.k, s.a_t ? "ᵀ" : "", s.k,
                                                                s.n, s.b_t ? "ᵀ" : ""), g);
    gflops[s.name] = g;
  }
  nlohmann::ordered_json json = {{"bench", "gemm_shapes"}, {"threads", get_num_threads()},
                                  {"isa", cpu::sgemm_isa()}, {"library", library}, {"gflops", gflops}};
  host.finish(json);
  fmt::print("{}\n", json.dump());
  return 0;
}
