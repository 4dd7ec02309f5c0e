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

double tp_comm_seconds(const AlphaBeta& link, int t, int layers, double activation_bytes) {
  KILN_CHECK(t >= 1 && layers >= 0, "tp_comm_seconds: {} tensor ranks, {} layers", t, layers);
  return 4.0 * layers * allreduce_seconds(link, t, activation_bytes);
}

double fsdp_comm_seconds(const AlphaBeta& link, int n, int units, double param_bytes, double grad_bytes) {
  KILN_CHECK(n >= 1 && units >= 1, "fsdp_comm_seconds: {} ranks, {} units", n, units);
  return units * (2 * allgather_seconds(link, n, param_bytes / units) + reduce_scatter_seconds(link, n, grad_bytes / units));
}

ShardedStepPrediction predict_sharded_step(const TransformerShape& m, const ClusterSpec& c, const ShardedLayout& l,
                                           double tokens_per_gpu, double bytes_per_element) {
  KILN_CHECK(l.tensor >= 1 && l.data >= 1 && m.layers >= 1 && tokens_per_gpu > 0,
             "predict_sharded_step: tensor {}, data {}, {} layers, {} tokens per GPU", l.tensor, l.data, m.layers,
             tokens_per_gpu);
  KILN_CHECK(l.tensor <= c.gpus_per_node, "predict_sharded_step: tensor size {} beyond a node of {} GPUs", l.tensor,
             c.gpus_per_node);
  ShardedStepPrediction p;
  const double flops = m.flops_per_token() * tokens_per_gpu;
  p.compute_s = flops / (c.peak_flops * c.kernel_efficiency);
  // A tensor group works on its ranks' tokens together: t x tokens_per_gpu rows of width C.
  p.tp_s = tp_comm_seconds(c.nvlink, l.tensor, m.layers, l.tensor * tokens_per_gpu * m.hidden * bytes_per_element);
  const AlphaBeta& dp_link = l.data * l.tensor <= c.gpus_per_node ? c.nvlink : c.network;
  const double shard_bytes = m.params / l.tensor * bytes_per_element;  // this tensor rank's part of the model
  if (l.fsdp) {
    p.dp_comm_s = fsdp_comm_seconds(dp_link, l.data, m.layers, shard_bytes, shard_bytes);
    const double unit = allgather_seconds(dp_link, l.data, shard_bytes / m.layers) +
                        reduce_scatter_seconds(dp_link, l.data, shard_bytes / m.layers);
    p.exposed_s = std::max(0.0, p.dp_comm_s - p.compute_s) + (l.data > 1 ? unit : 0.0);
    p.state_bytes = 16 * m.params / l.tensor / l.data;
  } else {
    p.dp_comm_s = allreduce_seconds(dp_link, l.data, shard_bytes);
    const double last = allreduce_seconds(dp_link, l.data, shard_bytes / m.layers);
    p.exposed_s = std::max(0.0, p.dp_comm_s - p.compute_s * 2 / 3) + last;
    p.state_bytes = 16 * m.params / l.tensor;
  }
  p.step_s = p.compute_s + p.tp_s + p.exposed_s;
  p.mfu = flops / (p.step_s * c.peak_flops);
  return p;
}

}  // namespace kiln::bench
