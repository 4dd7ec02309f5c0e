// Pipeline inference (Pipeline::forward): one batch through the stages without autograd, for
// evaluation. Each activation is preceded by a header with its shape and dtype, or with a
// failure flag so that a stage that throws stops the later ones instead of leaving them waiting.
// With virtual stages the batch goes around the ranks once per chunk.
// Pipeline::from_last_stage brings the last stage's metrics to every rank.
#include <fmt/format.h>

#include "core/error.h"
#include "core/grad_mode.h"
#include "core/ops.h"
#include "distributed/backend/init.h"
#include "distributed/pipeline/pipeline.h"

namespace kiln::dist {
namespace {

constexpr int kMaxDims = 8;
constexpr int kHeaderLen = 3 + kMaxDims;  // status, dtype, ndim, dims
// Apart from train_step's tags (below 1 << 21); + 2 x the chunk the message is for.
constexpr int kForwardHeaderTag = (1 << 21) + 1;
constexpr int kForwardTag = (1 << 21) + 2;

}  // namespace

Tensor Pipeline::forward(const Tensor& input) {
  const int s = stage(), last = num_virtual() - 1;
  const Device comm = comm_device();
  NoGradGuard no_grad;
  auto checked_wait = [&](const WorkPtr& w, const char* what, int peer) {
    try {
      w->wait();
    } catch (const std::exception& e) {
      fail("Pipeline::forward: stage {} (rank {}) lost stage {}: {} failed: {}", s, get_rank(), peer, what, e.what());
    }
  };
  std::string err;
  Tensor out;
  for (int c = 0; c < num_chunks(); ++c) {
    const int k = virtual_stage(c);
    Tensor x;
    if (k == 0) {
      x = input;
      if (!x.defined()) err = "Pipeline::forward: stage 0 (rank 0) needs the input";
    } else {
      // Always received, even after this rank failed, so that the sender is never left waiting.
      Tensor h = zeros({kHeaderLen}, TensorOptions(kInt64).device(comm));
      checked_wait(pg_->recv(h, prev_rank(), kForwardHeaderTag + 2 * c), "receiving the header", prev_rank());
      h = h.to(kCPU);
      const int64_t* v = h.data_ptr<int64_t>();
      if (v[0] != 0) {
        if (err.empty())
          err = fmt::format("Pipeline::forward: stage {} (rank {}) stops because stage {} failed", k, get_rank(),
                            k - 1);
      } else {
        x = empty(Shape(v + 3, v + 3 + v[2]), dtype(static_cast<DType>(v[1])).device(options_.device));
        checked_wait(pg_->recv(x, prev_rank(), kForwardTag + 2 * c), "receiving the activation", prev_rank());
      }
    }
    if (err.empty()) {
      try {
        out = chunks_[c]->forward(x.to(options_.device));
        KILN_CHECK(k == last || out.dim() <= kMaxDims, "its output has {} dimensions (at most {})", out.dim(),
                   kMaxDims);
      } catch (const std::exception& e) {
        err = fmt::format("Pipeline::forward: stage {} (rank {}) failed on {} {}: {}", k, get_rank(), x.shape_str(),
                          x.dtype(), e.what());
      }
    }
    if (k < last) {
      const int to = chunk_of(k + 1);
      Tensor h = zeros({kHeaderLen}, kInt64);
      int64_t* v = h.data_ptr<int64_t>();
      v[0] = err.empty() ? 0 : 1;
      if (err.empty()) {
        v[1] = static_cast<int64_t>(out.dtype());
        v[2] = out.dim();
        for (int64_t d = 0; d < out.dim(); ++d) v[3 + d] = out.size(d);
      }
      checked_wait(pg_->send(h.to(comm), next_rank(), kForwardHeaderTag + 2 * to), "sending the header", next_rank());
      if (err.empty())
        checked_wait(pg_->send(out.contiguous(), next_rank(), kForwardTag + 2 * to), "sending the activation",
                     next_rank());
    }
  }
  if (!err.empty()) throw Error(err);
  return is_last() ? out : Tensor();
}

std::vector<double> Pipeline::from_last_stage(const std::vector<double>& values, ReduceOp op) {
  Tensor t = tensor(values).to(kFloat64).to(comm_device());
  const auto& replicas = options_.data_parallel_group;
  if (is_last() && replicas && replicas->size() > 1) replicas->allreduce(t, op)->wait();
  pg_->broadcast(t, num_stages() - 1)->wait();
  return t.to(kCPU).to_vector<double>();
}

}  // namespace kiln::dist
