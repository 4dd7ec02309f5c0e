#include "bench/scaling_math.h"

#include <algorithm>

#include "core/error.h"

namespace kiln::bench {

AlphaBeta fit_allreduce(const std::vector<std::pair<double, double>>& points, int n, double min_bytes) {
  KILN_CHECK(n >= 2, "fit_allreduce: needs n >= 2 ranks, got {}", n);
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
  KILN_CHECK(k >= 2, "fit_allreduce: {} points at or above {} bytes; need at least 2", k, min_bytes);
  const double den = k * sxx - sx * sx;
  KILN_CHECK(den > 0, "fit_allreduce: every point has the same size");
  double b = (k * sxy - sx * sy) / den;
  double a = (sy - b * sx) / k;
  KILN_CHECK(b > 0, "fit_allreduce: time does not grow with size (slope {} s/byte)", b);
  a = std::max(a, 0.0);  // a negative intercept is noise: no latency is the closest physical value
  return {a / (2.0 * (n - 1)), 2.0 * (n - 1) / (n * b)};
}

double allreduce_seconds(const AlphaBeta& m, int n, double bytes) {
  if (n < 2) return 0;
  return 2.0 * (n - 1) * m.alpha_s + 2.0 * (n - 1) / n * bytes / m.bus_bytes_per_s;
}

double reduce_scatter_seconds(const AlphaBeta& m, int n, double bytes) {
  if (n < 2) return 0;
  return (n - 1) * m.alpha_s + static_cast<double>(n - 1) / n * bytes / m.bus_bytes_per_s;
}

double allgather_seconds(const AlphaBeta& m, int n, double bytes) { return reduce_scatter_seconds(m, n, bytes); }

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

StepPrediction predict_step_with(const StepProfile& p, const std::function<double(double)>& allreduce,
                                 double compute_scale) {
  StepPrediction out;
  double end = 0;
  for (const BucketTiming& b : p.buckets) {
    const double c = allreduce(b.bytes);
    end = std::max(end, b.ready_s * compute_scale) + c;
    out.comm_s += c;
  }
  const double bwd = p.backward_s * compute_scale;
  out.exposed_s = std::max(0.0, end - bwd);
  out.step_s = (p.forward_s + p.optimizer_s) * compute_scale + bwd + out.exposed_s;
  const double one = p.forward_s + p.backward_s + p.optimizer_s;
  out.efficiency = out.step_s > 0 ? one / out.step_s : 1;
  return out;
}

}  // namespace kiln::bench
