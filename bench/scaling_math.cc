#include "bench/scaling_math.h"

#include <algorithm>

#include "core/error.h"

namespace kiln::bench {

double ring_steps(Collective c, int n) { return (c == Collective::kAllReduce ? 2.0 : 1.0) * (n - 1); }

const char* collective_name(Collective c) {
  switch (c) {
    case Collective::kAllReduce: return "allreduce";
    case Collective::kReduceScatter: return "reduce_scatter";
    case Collective::kAllGather: return "allgather";
  }
  return "?";
}

Collective parse_collective(const std::string& name) {
  for (Collective c : {Collective::kAllReduce, Collective::kReduceScatter, Collective::kAllGather})
    if (name == collective_name(c)) return c;
  fail("collective: '{}' is none of allreduce, reduce_scatter, allgather", name);
}

AlphaBeta fit_ring(Collective c, const std::vector<std::pair<double, double>>& points, int n, double min_bytes) {
  const char* what = collective_name(c);
  KILN_CHECK(n >= 2, "fit {}: needs n >= 2 ranks, got {}", what, n);
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  int k = 0;
  for (auto [x, y] : points) {
    if (x < min_bytes) continue;
    sx += x;
    sy += y;
    sxx += x * x;
    sxy += x * y;
    ++k;
  }
  KILN_CHECK(k >= 2, "fit {}: {} points at or above {} bytes; need at least 2", what, k, min_bytes);
  const double den = k * sxx - sx * sx;
  KILN_CHECK(den > 0, "fit {}: every point has the same size", what);
  double b = (k * sxy - sx * sy) / den;
  double a = (sy - b * sx) / k;
  KILN_CHECK(b > 0, "fit {}: time does not grow with size (slope {} s/byte)", what, b);
  a = std::max(a, 0.0);  // a negative intercept is noise: no latency is the closest physical value
  const double steps = ring_steps(c, n);
  return {a / steps, steps / (n * b)};
}

double collective_seconds(Collective c, const AlphaBeta& m, int n, double bytes) {
  if (n < 2) return 0;
  const double steps = ring_steps(c, n);
  return steps * m.alpha_s + steps / n * bytes / m.bus_bytes_per_s;
}

double allreduce_seconds(const AlphaBeta& m, int n, double bytes) {
  return collective_seconds(Collective::kAllReduce, m, n, bytes);
}

double reduce_scatter_seconds(const AlphaBeta& m, int n, double bytes) {
  return collective_seconds(Collective::kReduceScatter, m, n, bytes);
}

double allgather_seconds(const AlphaBeta& m, int n, double bytes) {
  return collective_seconds(Collective::kAllGather, m, n, bytes);
}

double hierarchical_allreduce_seconds(const AlphaBeta& intra, const AlphaBeta& inter, int g, int n, double bytes) {
  KILN_CHECK(g >= 1 && n >= 1, "hierarchical_allreduce_seconds: {} ranks in nodes of {}", n, g);
  if (n <= g) return allreduce_seconds(intra, n, bytes);
  KILN_CHECK(n % g == 0, "hierarchical_allreduce_seconds: {} ranks do not fill nodes of {}", n, g);
  return reduce_scatter_seconds(intra, g, bytes) + allreduce_seconds(inter, n / g, bytes / g) +
         allgather_seconds(intra, g, bytes);
}

StepPrediction predict_step(const StepProfile& p, const AlphaBeta& link, int n, double compute_scale) {
  return predict_step_with(p, [&](double bytes) { return allreduce_seconds(link, n, bytes); }, compute_scale);
}

namespace {
/// The buckets' communication, one after the other on one thread, each once it is ready and the
/// previous one is done; sets comm_s and exposed_s (past the end of backward).
void overlap_buckets(const StepProfile& p, const std::function<double(double)>& collective, double compute_scale,
                     StepPrediction& out) {
  double end = 0;
  for (const BucketTiming& b : p.buckets) {
    const double c = collective(b.bytes);
    end = std::max(end, b.ready_s * compute_scale) + c;
    out.comm_s += c;
  }
  out.exposed_s = std::max(0.0, end - p.backward_s * compute_scale);
}

void set_efficiency(const StepProfile& p, StepPrediction& out) {
  const double one = p.forward_s + p.backward_s + p.optimizer_s;
  out.efficiency = out.step_s > 0 ? one / out.step_s : 1;
}
}  // namespace

StepPrediction predict_step_with(const StepProfile& p, const std::function<double(double)>& allreduce,
                                 double compute_scale) {
  StepPrediction out;
  overlap_buckets(p, allreduce, compute_scale, out);
  out.step_s = (p.forward_s + p.backward_s + p.optimizer_s) * compute_scale + out.exposed_s;
  set_efficiency(p, out);
  return out;
}

StepPrediction predict_zero_step_with(const StepProfile& p, const std::function<double(double)>& reduce_scatter,
                                      const std::function<double(double)>& allgather, int n, double compute_scale) {
  KILN_CHECK(n >= 1, "predict_zero_step_with: {} ranks", n);
  StepPrediction out;
  overlap_buckets(p, reduce_scatter, compute_scale, out);
  double gather = 0;
  for (const BucketTiming& b : p.buckets) gather += allgather(b.bytes);
  out.comm_s += gather;
  out.step_s = (p.forward_s + p.backward_s + p.optimizer_s / n) * compute_scale + out.exposed_s + gather;
  set_efficiency(p, out);
  return out;
}

}  // namespace kiln::bench
