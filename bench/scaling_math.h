// The α-β model of collectives and of a data-parallel step, kept apart from measuring so it can
// be tested on its own. A ring collective over n ranks moves its data in n-1 (reduce-scatter,
// all-gather) or 2(n-1) (all-reduce) steps, each paying a latency α; every rank sends
// (n-1)/n or 2(n-1)/n of the message over its link at the bus bandwidth B:
//   all-reduce      t = 2(n-1)·α + 2(n-1)/n · bytes / B
//   reduce-scatter  t =  (n-1)·α +  (n-1)/n · bytes / B      (and all-gather the same)
// A DDP step: forward, then backward during which bucket i becomes ready at r_i and is
// all-reduced on one communication thread in bucket order (start_i = max(r_i, end_{i-1})), then
// the optimizer once the last bucket is done: step = fwd + max(bwd, end_last) + opt. ZeRO-1
// reduce-scatters the buckets instead, steps 1/n of the optimizer and all-gathers the parameters.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace kiln::bench {

struct AlphaBeta {
  double alpha_s = 0;        // latency per ring step
  double bus_bytes_per_s = 0;  // B
};

/// The ring collectives the model fits and predicts: an all-reduce makes 2(n-1) steps, a
/// reduce-scatter or an all-gather n-1.
enum class Collective { kAllReduce, kReduceScatter, kAllGather };
/// "allreduce", "reduce_scatter", "allgather" (allreduce_bench's --op); parse_collective throws
/// naming a bad one.
const char* collective_name(Collective c);
Collective parse_collective(const std::string& name);

/// Least-squares fit of t = a + b·bytes over (bytes, seconds) points, read as the ring collective
/// `c` over n ranks of s = 2(n-1) or n-1 steps: α = a / s, B = s / (n·b). Points below
/// `min_bytes` are ignored (their time is scheduling noise, not the link). Throws kiln::Error for
/// n < 2 or < 2 points.
AlphaBeta fit_ring(Collective c, const std::vector<std::pair<double, double>>& bytes_seconds, int n,
                   double min_bytes = 0);
inline AlphaBeta fit_allreduce(const std::vector<std::pair<double, double>>& bytes_seconds, int n,
                               double min_bytes = 0) {
  return fit_ring(Collective::kAllReduce, bytes_seconds, n, min_bytes);
}
/// The ring steps of `c` over n ranks: 2(n-1) for an all-reduce, n-1 otherwise; each rank sends
/// ring_steps / n of the buffer over its link (nccl-tests' busbw = algbw x that).
double ring_steps(Collective c, int n);
/// The α-β time of `c` over n ranks (0 for one rank).
double collective_seconds(Collective c, const AlphaBeta& m, int n, double bytes);

double allreduce_seconds(const AlphaBeta& m, int n, double bytes);
double reduce_scatter_seconds(const AlphaBeta& m, int n, double bytes);
double allgather_seconds(const AlphaBeta& m, int n, double bytes);

/// All-reduce over n ranks in nodes of g, hierarchically with every GPU its own NIC (the NCCL
/// way): reduce-scatter within the node (intra), all-reduce of each rank's 1/g share among the
/// n/g nodes (inter, all g NICs at once), all-gather within the node. Equals the flat ring on
/// `intra` when n <= g.
double hierarchical_allreduce_seconds(const AlphaBeta& intra, const AlphaBeta& inter, int g, int n, double bytes);

struct BucketTiming {
  double ready_s = 0;  // since backward started
  double bytes = 0;
};

struct StepProfile {
  double forward_s = 0, backward_s = 0, optimizer_s = 0;
  std::vector<BucketTiming> buckets;  // in launch order
  double cpu_s = 0;  // CPU time the process spent in those three phases (0: not measured); not used by predict_step
};

struct StepPrediction {
  double step_s = 0;
  double comm_s = 0;     // sum of the buckets' all-reduce times
  double exposed_s = 0;  // how long the optimizer waited after backward for the last bucket
  double efficiency = 1;  // one rank's step time / this step time (weak scaling: batch per rank fixed)
};

/// The step on n ranks. `compute_scale` stretches forward, backward and optimizer (and the
/// ready times) for ranks that share cores (1 when each has its own).
StepPrediction predict_step(const StepProfile& p, const AlphaBeta& link, int n, double compute_scale = 1);
/// The same with each bucket's all-reduce taking `allreduce(bytes)` seconds.
StepPrediction predict_step_with(const StepProfile& p, const std::function<double(double)>& allreduce,
                                 double compute_scale = 1);

/// A ZeRO-1 step (dist::ZeroRedundancyOptimizer) on n ranks: the buckets are reduce-scattered
/// as DDP all-reduces them (in order on one communication thread, overlapped with backward),
/// the optimizer steps this rank's 1/n of the parameters, then every bucket's parameters are
/// all-gathered (after the step, not overlapped):
///   step = fwd + max(bwd, end_last) + opt / n + Σ allgather(bucket bytes)
/// comm_s counts both collectives. On one rank it is the DDP step.
StepPrediction predict_zero_step_with(const StepProfile& p, const std::function<double(double)>& reduce_scatter,
                                      const std::function<double(double)>& allgather, int n,
                                      double compute_scale = 1);

/// Megatron's tensor-parallel communication per step: each of `layers` transformer layers
/// all-reduces its [tokens, hidden] activations (`activation_bytes`) among the t tensor ranks
/// twice in forward (after attention and after the MLP) and twice in backward (the conjugate
/// operators), on the critical path (not overlapped with compute). 0 for t = 1.
double tp_comm_seconds(const AlphaBeta& link, int t, int layers, double activation_bytes);

/// FSDP's communication per step over n ranks, the model in `units` equal units: each unit's
/// parameters all-gathered before its forward and again before its backward, and its gradients
/// reduce-scattered after it: 2 all-gathers of param_bytes / units and one reduce-scatter of
/// grad_bytes / units per unit.
double fsdp_comm_seconds(const AlphaBeta& link, int n, int units, double param_bytes, double grad_bytes);

/// A GPT-like transformer: P parameters, L layers of width C, sequences of T tokens.
struct TransformerShape {
  double params = 0;
  int layers = 0;
  double hidden = 0, seq_len = 0;
  /// Model FLOPs per token, forward and backward: 6P + 12 L T C (PaLM appendix B; no recompute).
  double flops_per_token() const { return 6 * params + 12.0 * layers * seq_len * hidden; }
};

/// The machines: per-GPU peak and the share of it the layers' kernels reach, GPUs per node, the
/// links (NVLink within a node, one NIC per GPU between nodes).
struct ClusterSpec {
  double peak_flops = 0, kernel_efficiency = 1;
  int gpus_per_node = 8;
  AlphaBeta nvlink, network;
};

/// world = data x tensor; the data ranks replicate (DDP) or fully shard (FSDP) the 1/t of the
/// model their tensor rank holds.
struct ShardedLayout {
  int tensor = 1, data = 1;
  bool fsdp = false;
};

struct ShardedStepPrediction {
  double compute_s = 0;  // this GPU's share of the FLOPs at peak x kernel_efficiency
  double tp_s = 0;       // tensor-parallel all-reduces (exposed)
  double dp_comm_s = 0;  // data-parallel collectives (all-reduce, or FSDP's gathers and reduce-scatter)
  double exposed_s = 0;  // of dp_comm_s, what compute does not hide
  double step_s = 0, mfu = 0;
  double state_bytes = 0;  // per GPU: 16 bytes per parameter held (2 + 2 + 12, mixed precision), sharded as laid out
};

/// One step of `tokens_per_gpu` tokens per GPU (weak scaling), parameters and gradients moved in
/// `bytes_per_element`. Tensor ranks share a node (NVLink); the data-parallel collectives run
/// over NVLink when data x tensor fits a node, else over the network (a ring across nodes, each
/// GPU on its own NIC). DDP's all-reduce overlaps backward (2/3 of compute) but for its last
/// unit; FSDP's gathers and reduce-scatters overlap the whole compute (prefetch) but for the
/// first unit's gather and the last unit's reduce-scatter; each layer is a unit. Throws
/// kiln::Error for a tensor size beyond a node or sizes below 1.
ShardedStepPrediction predict_sharded_step(const TransformerShape& m, const ClusterSpec& c, const ShardedLayout& l,
                                           double tokens_per_gpu, double bytes_per_element);

}  // namespace kiln::bench
