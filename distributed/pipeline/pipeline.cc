// Pipeline parallel: stage construction, the first-step shape negotiation, and the schedule
// runner. Receives are posted at the start of a step in the order the schedule waits for them
// (the Gloo backend completes posted receives in posting order), so every transfer can land
// while the stage computes. With virtual stages (interleaved), rank r's chunk c is virtual stage
// c*p + r: activations go to the next rank (from the last rank, to rank 0's next chunk) and
// gradients to the previous one, and each message's tag names its micro-batch and the chunk it
// is for.
#include "distributed/pipeline/pipeline.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>

#include "autograd/engine.h"
#include "core/error.h"
#include "core/grad_mode.h"
#include "core/ops.h"
#include "distributed/backend/init.h"

namespace kiln::dist {
namespace {

constexpr int kMaxDims = 8;
// The header every step starts with: status, negotiate (0: shapes as before), dtype, ndim, dims.
constexpr int kHeaderLen = 4 + kMaxDims;
constexpr int kGradTag = 1 << 16;         // + the activation's tag
constexpr int kHeaderTag = 1 << 20;       // + the chunk the first-step shapes are for
constexpr int kMaxTransfers = 1 << 16;    // micro-batches x chunks: activation tags stay below kGradTag

// The tag of micro-batch `micro`'s activation into chunk `chunk` of `chunks`.
int activation_tag(int micro, int chunk, int chunks) { return micro * chunks + chunk; }
constexpr int kMessageLen = 768;          // characters of a first-step error shared with all stages

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Restores a module's training flag when the dry run ends, however it ends.
struct EvalGuard {
  nn::Module& m;
  bool was;
  explicit EvalGuard(nn::Module& mod) : m(mod), was(mod.is_training()) { m.eval(); }
  ~EvalGuard() { m.train(was); }
};

Tensor encode_message(const std::string& msg) {
  Tensor t = zeros({kMessageLen}, kInt32);
  int32_t* p = t.data_ptr<int32_t>();
  for (size_t i = 0; i < msg.size() && i + 1 < kMessageLen; ++i) p[i] = static_cast<unsigned char>(msg[i]);
  return t;
}

std::string decode_message(const Tensor& t) {
  std::string s;
  const int32_t* p = t.data_ptr<int32_t>();
  for (int i = 0; i < kMessageLen && p[i] != 0; ++i) s.push_back(static_cast<char>(p[i]));
  return s;
}

}  // namespace

struct Pipeline::Micro {
  Tensor input;   // virtual stage 0: the slice of the batch; later ones: the received activation (a leaf)
  Tensor output;  // what backward starts from: the stage's output, or the scaled loss on the last
  Tensor grad;    // the received gradient of `output`
  WorkPtr act_recv, grad_recv;
};

PipelineGroups pipeline_groups(int stages) {
  const int world = get_world_size(), rank = get_rank();
  KILN_CHECK(stages >= 1 && world % stages == 0,
             "pipeline_groups: a world of {} ranks does not split into replicas of {} stages", world, stages);
  PipelineGroups g;
  g.stage = rank % stages;
  g.replica = rank / stages;
  // Every rank creates every group, in the same order.
  for (int r = 0; r < world / stages; ++r) {
    std::vector<int> ranks;
    for (int s = 0; s < stages; ++s) ranks.push_back(r * stages + s);
    if (auto pg = new_group(ranks)) g.pipeline = pg;
  }
  for (int s = 0; s < stages; ++s) {
    std::vector<int> ranks;
    for (int r = 0; r < world / stages; ++r) ranks.push_back(r * stages + s);
    if (auto pg = new_group(ranks)) g.data = pg;
  }
  return g;
}

Pipeline::Pipeline(std::shared_ptr<nn::Sequential> model, std::shared_ptr<ProcessGroup> pg, PipelineOptions options)
    : pg_(std::move(pg)), options_(std::move(options)) {
  KILN_CHECK(model != nullptr, "Pipeline: the model is null");
  KILN_CHECK(pg_ != nullptr, "Pipeline: the process group is null");
  const int n = static_cast<int>(model->size()), p = pg_->size(), s = pg_->rank(), v = options_.virtual_stages;
  KILN_CHECK(options_.micro_batches >= 1, "Pipeline: micro_batches must be at least 1, got {}",
             options_.micro_batches);
  try {
    check_schedule(options_.schedule, p, options_.micro_batches, v);
  } catch (const Error& e) {
    fail("Pipeline: {}", e.what());
  }
  KILN_CHECK(static_cast<int64_t>(options_.micro_batches) * v <= kMaxTransfers,
             "Pipeline: {} micro-batches x {} virtual stages per rank is more than {} transfers per step",
             options_.micro_batches, v, kMaxTransfers);
  const int vn = p * v;  // virtual stages
  if (v == 1) {
    KILN_CHECK(p <= n, "Pipeline: {} stages but the model has only {} layers (each stage needs at least one layer)",
               p, n);
  } else {
    KILN_CHECK(vn <= n,
               "Pipeline: {} virtual stages ({} stages x {} per rank) but the model has only {} layers (each needs at "
               "least one layer)",
               vn, p, v, n);
  }
  if (options_.boundaries.empty()) {
    std::vector<int64_t> counts;
    for (size_t i = 0; i < model->size(); ++i) counts.push_back((*model)[i]->num_parameters());
    boundaries_ = balanced_boundaries(counts, vn);
  } else {
    boundaries_ = options_.boundaries;
    bool ok = static_cast<int>(boundaries_.size()) == vn + 1 && boundaries_.front() == 0 && boundaries_.back() == n;
    for (int k = 0; ok && k < vn; ++k) ok = boundaries_[k] < boundaries_[k + 1];
    KILN_CHECK(ok,
               "Pipeline: boundaries {} do not split {} layers into {} {}stages (need {} strictly increasing indices "
               "from 0 to {})",
               boundaries_, n, vn, v == 1 ? "" : "virtual ", vn + 1, n);
  }
  // The rank's layers, chunk after chunk, and the same modules again by chunk.
  stage_ = std::make_shared<nn::Sequential>();
  for (int c = 0; c < v; ++c) {
    auto chunk = std::make_shared<nn::Sequential>();
    for (int i = boundaries_[c * p + s]; i < boundaries_[c * p + s + 1]; ++i) {
      chunk->push_back((*model)[i]);
      stage_->push_back((*model)[i]);
      layers_.push_back(i);
    }
    chunks_.push_back(std::move(chunk));
  }
  stage_->to(options_.device);
  io_.assign(v, ChunkIO{});
  if (options_.data_parallel_group && options_.data_parallel_group->size() > 1)
    for (const auto& chunk : chunks_)
      ddps_.push_back(std::make_unique<DistributedDataParallel>(chunk, options_.data_parallel_group, options_.ddp));
  const int m = options_.micro_batches;
  if (m < p && s == 0)
    fmt::print(stderr,
               "Pipeline warning: {} micro-batches for {} stages: the bubble, (p-1)/(m+p-1) = {:.0f}% of each step, "
               "dominates; use at least {} micro-batches (several times more is better)\n",
               m, p, 100.0 * (p - 1) / (m + p - 1), p);
}

std::string Pipeline::global_name(const std::string& local) const {
  size_t dot = local.find('.');
  int i = std::stoi(local.substr(0, dot));
  KILN_CHECK(i >= 0 && i < static_cast<int>(layers_.size()), "Pipeline::global_name: stage {} has no layer {} ('{}')",
             stage(), i, local);
  return std::to_string(layers_[i]) + (dot == std::string::npos ? "" : local.substr(dot));
}

std::string Pipeline::local_name(const std::string& global) const {
  size_t dot = global.find('.');
  int i = std::stoi(global.substr(0, dot));
  auto it = std::find(layers_.begin(), layers_.end(), i);
  if (it == layers_.end()) return "";
  return std::to_string(it - layers_.begin()) + (dot == std::string::npos ? "" : global.substr(dot));
}

std::string Pipeline::describe(int chunk) const {
  const int k = virtual_stage(chunk);
  if (num_chunks() == 1)
    return fmt::format("stage {} (rank {}, layers [{}, {}))", k, get_rank(), boundaries_[k], boundaries_[k + 1]);
  return fmt::format("stage {} (rank {}, chunk {}, layers [{}, {}))", k, get_rank(), chunk, boundaries_[k],
                     boundaries_[k + 1]);
}

void Pipeline::negotiate(const std::vector<Tensor>& inputs, const std::vector<Tensor>& targets,
                         const PipelineLoss& loss, std::string err, const Tensor& header) {
  const int s = stage(), p = num_stages(), v = num_chunks(), last = num_virtual() - 1;
  const Device comm = comm_device();
  // The chunks in virtual-stage order, so the shapes travel around the ranks v times. Once this
  // rank or one before it has failed, its later chunks only pass the failure on.
  bool failed = !err.empty();
  for (int c = 0; c < v; ++c) {
    const int k = virtual_stage(c);
    bool upstream_failed = false;
    Tensor x;
    if (k == 0) {
      if (!failed) x = inputs[0];
    } else {
      Tensor h = header;  // chunk 0 of a later stage: the step's header carries its shapes
      if (c > 0) {
        h = zeros({kHeaderLen}, TensorOptions(kInt64).device(comm));
        try {
          pg_->recv(h, prev_rank(), kHeaderTag + c)->wait();
        } catch (const std::exception& e) {
          fail("Pipeline: {} lost stage {}: receiving its first-step shapes failed: {}", describe(c), k - 1, e.what());
        }
        h = h.to(kCPU);
      }
      const int64_t* hv = h.data_ptr<int64_t>();
      upstream_failed = hv[0] != 0;
      if (!upstream_failed) {
        io_[c].in_dtype = static_cast<DType>(hv[2]);
        io_[c].in_shape = Shape(hv + 4, hv + 4 + hv[3]);
        x = zeros(io_[c].in_shape, dtype(io_[c].in_dtype).device(options_.device));
      }
    }
    Tensor out;
    if (!failed && !upstream_failed) {
      try {
        NoGradGuard no_grad;
        EvalGuard eval(*stage_);  // the rank's module: its flag is the one the caller sets
        out = chunks_[c]->forward(x);
        if (k == last) {
          Tensor l = loss(out, targets[0]);
          KILN_CHECK(l.numel() == 1, "the loss gave {} values, not one (it must reduce over the micro-batch)",
                     l.shape_str());
        } else {
          KILN_CHECK(out.is_floating_point(), "its output is {}, but activations sent between stages must be floating "
                     "to carry gradients", out.dtype());
          KILN_CHECK(out.dim() <= kMaxDims, "its output has {} dimensions (at most {})", out.dim(), kMaxDims);
          io_[c].out_shape = out.sizes();
          io_[c].out_dtype = out.dtype();
        }
      } catch (const std::exception& e) {
        err = fmt::format("Pipeline: {} cannot run on {} {} {}: {}", describe(c),
                          k == 0 ? "its first micro-batch" : fmt::format("stage {}'s output", k - 1), x.shape_str(),
                          x.dtype(), e.what());
      }
    }
    failed = failed || upstream_failed || !err.empty();
    if (k < last) {
      Tensor h = zeros({kHeaderLen}, kInt64);
      int64_t* hv = h.data_ptr<int64_t>();
      hv[0] = failed ? 1 : 0;
      hv[1] = 1;
      if (!failed) {
        hv[2] = static_cast<int64_t>(out.dtype());
        hv[3] = out.dim();
        for (int64_t d = 0; d < out.dim(); ++d) hv[4 + d] = out.size(d);
      }
      // Into the next virtual stage: chunk 0 of the next rank takes it as its step header.
      pg_->send(h.to(comm), next_rank(), kHeaderTag + chunk_of(k + 1))->wait();
    }
  }
  // Every stage learns every failure, so all of them throw rather than wait on a stopped peer.
  std::vector<Tensor> all;
  for (int r = 0; r < p; ++r) all.push_back(zeros({kMessageLen}, TensorOptions(kInt32).device(comm)));
  pg_->allgather(all, encode_message(err).to(comm))->wait();
  if (!err.empty()) throw Error(err);
  const std::string who = v == 1 ? describe(0) : fmt::format("stage {} (rank {})", s, get_rank());
  for (int r = 0; r < p; ++r) {
    std::string msg = decode_message(all[r].to(kCPU));
    if (!msg.empty()) fail("Pipeline: {} stops because stage {} failed the first-step check: {}", who, r, msg);
  }
  if (s == 0) first_input_shape_ = inputs[0].sizes();
  negotiated_ = true;
}

double Pipeline::train_step(const Tensor& input, const Tensor& target, const PipelineLoss& loss) {
  const auto t0 = Clock::now();
  const int m = options_.micro_batches, s = stage(), p = num_stages(), v = num_chunks(), last = num_virtual() - 1;
  std::vector<Tensor> inputs, targets;
  std::string err;
  auto split = [&](const Tensor& t, const char* what, std::vector<Tensor>& out) {
    if (!t.defined() || t.dim() == 0) {
      err = fmt::format("Pipeline: stage {} (rank {}) needs the batch's {} (a tensor with a batch dimension)", s,
                        get_rank(), what);
    } else if (t.size(0) % m != 0) {
      err = fmt::format("Pipeline: the batch's {} {} does not split into {} micro-batches ({} rows; stage {}, rank {})",
                        what, t.shape_str(), m, t.size(0), s, get_rank());
    } else {
      Tensor d = t.to(options_.device);
      const int64_t rows = t.size(0) / m;
      for (int j = 0; j < m; ++j) out.push_back(d.narrow(0, j * rows, rows));
    }
  };
  if (is_first()) split(input, "input", inputs);
  if (is_last() && err.empty()) split(target, "target", targets);
  // Every step starts with a header down the stages: stage 0 says whether the shapes must be
  // negotiated again (the first step, a new batch shape, or an error every stage must hear of).
  bool renegotiate;
  Tensor header;
  double header_wait = 0;
  if (is_first()) {
    renegotiate = !negotiated_ || !err.empty() || inputs[0].sizes() != first_input_shape_;
  } else {
    header = zeros({kHeaderLen}, TensorOptions(kInt64).device(comm_device()));
    try {
      auto t = Clock::now();
      pg_->recv(header, s - 1, kHeaderTag)->wait();
      header_wait = since(t);  // idle until the previous stage starts its step
    } catch (const std::exception& e) {
      fail("Pipeline: stage {} (rank {}) lost stage {}: receiving the step header failed: {}", s, get_rank(), s - 1,
           e.what());
    }
    header = header.to(kCPU);
    renegotiate = header.data_ptr<int64_t>()[1] != 0;
  }
  if (renegotiate) {
    negotiate(inputs, targets, loss, err, header);
  } else if (!err.empty()) {
    throw Error(err);  // the last stage's targets: the others fail as it leaves, naming it
  }

  const std::vector<PipelineAction> actions = schedule_actions(options_.schedule, s, p, m, v);
  std::vector<std::vector<Micro>> mbs(v, std::vector<Micro>(m));
  std::vector<const PipelineAction*> last_backward(v, nullptr);  // hybrid: where each chunk's replicas average
  for (const PipelineAction& a : actions) {
    Micro& mb = mbs[a.chunk][a.micro];
    const ChunkIO& io = io_[a.chunk];
    const int k = virtual_stage(a.chunk);
    if (a.forward && k > 0) {
      mb.input = empty(io.in_shape, dtype(io.in_dtype).device(options_.device));
      mb.act_recv = pg_->recv(mb.input, prev_rank(), activation_tag(a.micro, a.chunk, v));
    }
    if (!a.forward && k < last) {
      mb.grad = empty(io.out_shape, dtype(io.out_dtype).device(options_.device));
      mb.grad_recv = pg_->recv(mb.grad, next_rank(), kGradTag + activation_tag(a.micro, a.chunk, v));
    }
    if (!a.forward) last_backward[a.chunk] = &a;
  }

  struct Sent {
    WorkPtr work;
    int peer, micro;
    const char* what;
  };
  std::vector<Sent> sends;
  // Shapes as before: the next stage learns it after this stage's receives are posted.
  if (!renegotiate && s < p - 1)
    sends.push_back({pg_->send(zeros({kHeaderLen}, TensorOptions(kInt64).device(comm_device())), s + 1, kHeaderTag),
                     s + 1, 0, "sending the step header"});
  double loss_sum = 0;
  stats_.live_activations = 0;
  stats_.peak_activations = 0;
  stats_.header_wait = header_wait;
  stats_.activation_wait = stats_.gradient_wait = stats_.send_wait = 0;
  stats_.forward_seconds = stats_.backward_seconds = 0;
  stats_.chunk_forward_seconds.assign(v, 0);
  stats_.chunk_backward_seconds.assign(v, 0);
  stats_.action_seconds.clear();
  // A failed transfer (a peer that died, or a timeout) names the stages at both ends.
  auto wait_for = [&](const WorkPtr& w, const char* what, int micro, int peer, double& waited) {
    auto t = Clock::now();
    try {
      w->wait();
    } catch (const std::exception& e) {
      fail("Pipeline: stage {} (rank {}) lost stage {}: {} of micro-batch {} failed: {}", s, get_rank(), peer, what,
           micro, e.what());
    }
    waited += since(t);
  };
  for (const PipelineAction& a : actions) {
    Micro& mb = mbs[a.chunk][a.micro];
    const int k = virtual_stage(a.chunk);
    if (a.forward) {
      if (k > 0) {
        wait_for(mb.act_recv, "receiving the activation", a.micro, prev_rank(), stats_.activation_wait);
        mb.input.set_requires_grad(true);
      } else {
        mb.input = inputs[a.micro];
      }
      const auto tf = Clock::now();
      Tensor out;
      if (!ddps_.empty()) {
        auto local = ddps_[a.chunk]->no_sync();  // replicas average once, in the chunk's last backward
        out = ddps_[a.chunk]->forward(mb.input);
      } else {
        out = chunks_[a.chunk]->forward(mb.input);
      }
      if (k == last) {
        // Each micro-batch's mean loss weighs by its share of the batch: the sum is the batch mean.
        mb.output = loss(out, targets[a.micro]) * (1.0 / m);
        loss_sum += mb.output.item<double>();
      } else {
        mb.output = out;
      }
      const double took = since(tf);
      stats_.forward_seconds += took;
      stats_.chunk_forward_seconds[a.chunk] += took;
      stats_.action_seconds.push_back(took);
      if (k < last)
        sends.push_back({pg_->send(out.detach(), next_rank(), activation_tag(a.micro, chunk_of(k + 1), v)), next_rank(),
                         a.micro, "sending the activation"});
      stats_.peak_activations = std::max(stats_.peak_activations, ++stats_.live_activations);
    } else {
      if (!ddps_.empty() && &a == last_backward[a.chunk]) ddps_[a.chunk]->prepare_for_backward();
      if (k < last) wait_for(mb.grad_recv, "receiving the gradient", a.micro, next_rank(), stats_.gradient_wait);
      const auto tb = Clock::now();
      if (k == last) {
        autograd::backward({mb.output});
      } else {
        autograd::backward({mb.output}, {mb.grad});
      }
      const double took = since(tb);
      stats_.backward_seconds += took;
      stats_.chunk_backward_seconds[a.chunk] += took;
      stats_.action_seconds.push_back(took);
      if (k > 0) {
        const ChunkIO& io = io_[a.chunk];
        Tensor g = mb.input.grad();
        if (!g.defined()) g = zeros(io.in_shape, dtype(io.in_dtype).device(options_.device));
        sends.push_back({pg_->send(g, prev_rank(), kGradTag + activation_tag(a.micro, chunk_of(k - 1), v)), prev_rank(),
                         a.micro, "sending the gradient"});
      }
      mb = Micro{};  // frees this micro-batch's activations
      --stats_.live_activations;
    }
  }
  for (const Sent& x : sends) wait_for(x.work, x.what, x.micro, x.peer, stats_.send_wait);
  ++stats_.steps;
  stats_.wait_seconds = stats_.header_wait + stats_.activation_wait + stats_.gradient_wait + stats_.send_wait;
  stats_.step_seconds = since(t0);
  return is_last() ? loss_sum : std::numeric_limits<double>::quiet_NaN();
}

}  // namespace kiln::dist
