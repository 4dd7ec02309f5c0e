#include "distributed/backend/gloo_backend.h"

#include <signal.h>

#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/reduce.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <gloo/common/error.h>

#include <string_view>

#include "core/error.h"
#include "core/grad_mode.h"
#include "core/ops.h"
#include "distributed/store/errors.h"
#include "distributed/backend/gloo_ring.h"
#include "distributed/backend/gloo_store.h"

namespace kiln::dist {
namespace {

/// Throws `message` as TimeoutError when `cause` is a timeout (Kiln's or Gloo's "Timed out
/// waiting"), PeerError when a peer went away (Kiln's, or any other Gloo I/O error: a closed or
/// reset connection), else kiln::Error.
[[noreturn]] void rethrow_classified(const std::exception& cause, std::string message) {
  if (dynamic_cast<const gloo::IoException*>(&cause)) {
    if (std::string_view(cause.what()).find("Timed out") != std::string_view::npos)
      throw TimeoutError(std::move(message));
    throw PeerError(std::move(message));
  }
  rethrow_as(cause, std::move(message));
}

using ReduceFn = std::function<void(void*, const void*, const void*, size_t)>;

template <class T, class Op>
ReduceFn elementwise(Op op) {
  return [op](void* c, const void* a, const void* b, size_t n) {
    using acc = opmath_t<T>;
    T* out = static_cast<T*>(c);
    const T* x = static_cast<const T*>(a);
    const T* y = static_cast<const T*>(b);
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<T>(op(static_cast<acc>(x[i]), static_cast<acc>(y[i])));
  };
}

template <class T>
ReduceFn reducer(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return elementwise<T>([](auto x, auto y) { return x + y; });
    case ReduceOp::kMax: return elementwise<T>([](auto x, auto y) { return x < y ? y : x; });
    case ReduceOp::kMin: return elementwise<T>([](auto x, auto y) { return y < x ? y : x; });
  }
  fail("reduce op {} is unknown", static_cast<int>(op));
}

/// A contiguous host tensor the collective can read and write: `t` itself when it already is
/// one, else a copy that `unstage` writes back.
Tensor stage(const Tensor& t) {
  if (t.device() == kCPU && t.is_contiguous()) return t;
  return t.to(kCPU).contiguous();
}
void unstage(const Tensor& user, const Tensor& host) {
  if (!host.is_same(user)) Tensor(user).copy_(host);
}

void check_tensor(const char* op, const Tensor& t) {
  KILN_CHECK(t.defined(), "{}: the tensor is undefined", op);
}

void check_rank(const char* op, const char* what, int r, int size) {
  KILN_CHECK(r >= 0 && r < size, "{}: {} {} is out of range for a group of {} ranks", op, what, r, size);
}

void check_avg(const char* op, ReduceOp rop, const Tensor& t) {
  KILN_CHECK(rop != ReduceOp::kAvg || t.is_floating_point(), "{}: avg needs a floating dtype, got {}", op,
             t.dtype());
}

/// A send or receive posted on the caller's thread (as torch's Gloo SendWork/RecvWork). wait()
/// blocks on the transport itself (Gloo's buffer, or the shared-memory channel), so its
/// completion wakes the waiting thread directly: no hand-off through a worker thread on the way in
/// or out. It completes when waited (is_completed() is false until then).
class P2PWork final : public Work {
 public:
  /// `complete(timeout)` blocks until the transfer is done; false: it was aborted.
  using Complete = std::function<bool(Millis)>;
  P2PWork(const char* name, uint64_t seq, int rank, int peer, Millis timeout, Tensor user, Tensor host,
          Complete complete, bool is_send)
      : Work(name, seq), rank_(rank), peer_(peer), timeout_(timeout), user_(std::move(user)), host_(std::move(host)),
        complete_(std::move(complete)), is_send_(is_send) {
    mark_started();
  }
  ~P2PWork() override {
    // The transport may still read a send's memory: an unwaited send is finished here (a
    // receive's buffer is dropped from Gloo's pending list with it).
    if (is_send_) try {
        wait();
      } catch (...) {
      }
  }
  /// Posting it failed (a peer already gone): wait() rethrows, as for a transfer that fails later.
  void failed_to_post(const std::exception& e) {
    std::lock_guard<std::mutex> once(wait_mu_);
    waited_ = true;
    finish(describe(e, fmt::format("{} #{} failed on rank {}", name(), seq(), rank_)));
  }
  void wait() override {
    {
      std::lock_guard<std::mutex> once(wait_mu_);
      if (!waited_) {
        waited_ = true;
        std::exception_ptr error;
        try {
          if (!complete_(timeout_)) fail("{} was aborted", name());
          if (!is_send_) unstage(user_, host_);
        } catch (const std::exception& e) {
          const double s = std::chrono::duration<double>(Clock::now() - started()).count();
          error = describe(e, fmt::format("{} #{} ({} rank {}) failed after {:.1f} s on rank {}", name(), seq(),
                                          is_send_ ? "to" : "from", peer_, s, rank_));
        }
        complete_ = nullptr;  // the transport's state for it, and the memory it kept
        // The tensors too: a finished Work may outlive the step by far (the flight recorder's
        // ring keeps the last 2000), and must not keep a pipeline's activations alive with it.
        user_ = Tensor();
        host_ = Tensor();
        finish(error);
      }
    }
    Work::wait();
  }

 private:
  /// The same kind of error as `e` (timeout, peer gone, other), with `context` in front.
  static std::exception_ptr describe(const std::exception& e, const std::string& context) {
    try {
      rethrow_classified(e, fmt::format("{}: {}", context, e.what()));
    } catch (...) {
      return std::current_exception();
    }
  }

  int rank_, peer_;
  Millis timeout_;
  Tensor user_, host_;
  Complete complete_;
  bool is_send_;
  std::mutex wait_mu_;
  bool waited_ = false;
};

}  // namespace

ProcessGroupGloo::ProcessGroupGloo(std::shared_ptr<Store> store, int rank, int size, GlooOptions options)
    : ProcessGroup(rank, size, options.timeout), store_(std::move(store)) {
  KILN_CHECK(size >= 1 && rank >= 0 && rank < size, "ProcessGroupGloo: rank {} is out of range for size {}", rank,
             size);
  // Gloo writes to its peers' sockets without MSG_NOSIGNAL: a peer that dies would kill this rank
  // silently with SIGPIPE instead of failing the transfer with an error that names it.
  struct sigaction old_action {};
  if (sigaction(SIGPIPE, nullptr, &old_action) == 0 && old_action.sa_handler == SIG_DFL) signal(SIGPIPE, SIG_IGN);
  gloo::transport::tcp::attr attr;
  if (!options.iface.empty())
    attr.iface = options.iface;
  else
    attr.hostname = options.hostname;
  auto device = gloo::transport::tcp::CreateDevice(attr);
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
  context->setTimeout(options.timeout);
  GlooStore gloo_store(std::make_shared<PrefixStore>("gloo", store_));
  try {
    context->connectFullMesh(gloo_store, device);
  } catch (const std::exception& e) {
    rethrow_classified(e, fmt::format("ProcessGroupGloo: rank {} of {} could not connect to its peers at {}: {}", rank,
                                      size, options.iface.empty() ? options.hostname : options.iface, e.what()));
  }
  context_ = context;
  arrivals_ = std::make_unique<ArrivalLog>(std::make_shared<PrefixStore>("progress", store_), rank, size,
                                           std::min<Millis>(options.timeout, std::chrono::seconds(30)));
  p2p_ = std::make_shared<ShmP2P>(std::make_shared<PrefixStore>("p2p", store_), rank, size);
  shm_ = ShmAllreduce::create(*std::make_shared<PrefixStore>("shm", store_), rank, size, options.timeout);
  if (!shm_) {
    try {
      hier_ = HierarchicalAllreduce::create(store_, rank, size, device, options.timeout);
    } catch (const std::exception& e) {
      rethrow_classified(e, fmt::format("ProcessGroupGloo: rank {} of {} could not set up the hierarchical "
                                        "all-reduce: {}", rank, size, e.what()));
    }
  }
  // Every rank's side of every connection is up, and every rank is done with the store's set-up
  // keys (shared memory, node leaders), before anyone returns: a rank that returned and exited at
  // once would otherwise cut a peer still finishing its handshake, or stop the store (rank 0)
  // under a peer still polling it. Not a numbered collective: user collectives count from #1.
  try {
    gloo::BarrierOptions o(context_);
    o.setTag(0);
    o.setTimeout(options.timeout);
    gloo::barrier(o);
  } catch (const std::exception& e) {
    rethrow_classified(e, fmt::format("ProcessGroupGloo: rank {} of {} connected, but not every peer finished "
                                      "connecting: {}", rank, size, e.what()));
  }
  worker_ = std::thread([this] { worker_loop(); });
}

ProcessGroupGloo::~ProcessGroupGloo() {
  // The worker first: until it has run its last task it may still post a send or receive.
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

WorkPtr ProcessGroupGloo::enqueue(const char* name, std::function<void(const Task&)> run) {
  auto work = std::make_shared<Work>(name, ++next_seq_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    KILN_CHECK(!stop_, "{}: the process group is shut down", name);
    queue_.push_back(Task{work, std::move(run)});
  }
  cv_.notify_one();  // the worker is the only waiter
  return work;
}

void ProcessGroupGloo::fail_work(const Task& task, const std::exception& e) {
  double seconds = std::chrono::duration<double>(Work::Clock::now() - task.work->started()).count();
  std::string msg = arrivals_->describe_failure(task.work->name(), task.work->seq(), seconds, e.what());
  try {
    rethrow_classified(e, std::move(msg));  // the caller of wait() gets the same kind of error
  } catch (...) {
    task.work->finish(std::current_exception());
  }
}

void ProcessGroupGloo::worker_loop() {
  NoGradGuard no_grad;  // results are written into tensors in place, leaves included
  while (true) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left to run
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task.work->mark_started();
    arrivals_->entered(task.work->seq());
    try {
      task.run(task);
      task.work->finish();
    } catch (const std::exception& e) {
      fail_work(task, e);
    }
  }
}

void ProcessGroupGloo::allreduce_host(const Tensor& h, ReduceOp op, uint64_t seq) {
  KILN_DISPATCH_ALL(h.dtype(), "allreduce", [&]<class T>() {
    const size_t n = static_cast<size_t>(h.numel());
    auto ring = [&](const std::shared_ptr<gloo::Context>& context) {
      gloo::AllreduceOptions o(context);
      o.setOutput(static_cast<T*>(h.data_ptr()), n);
      o.setReduceFunction(reducer<T>(op));
      o.setTag(tag(seq));
      o.setTimeout(timeout_);
      gloo::allreduce(o);
    };
    if (shm_) {
      shm_->allreduce(h.data_ptr(), n, sizeof(T), reducer<T>(op));
    } else if (!hier_) {
      ring(context_);
    } else {  // within the node, then among the node leaders, then back within the node
      ShmAllreduce* node = hier_->node();
      if (node) node->allreduce(h.data_ptr(), n, sizeof(T), reducer<T>(op));
      if (hier_->leaders()) {
        try {
          ring(hier_->leaders());
        } catch (...) {
          if (node) node->abort();  // the node-mates waiting for the result fail now, not at the timeout
          throw;
        }
      }
      if (node) node->broadcast(h.data_ptr(), n * sizeof(T), 0);
    }
  });
}

std::string ProcessGroupGloo::allreduce_path() const {
  if (shm_) return "shared memory";
  if (hier_)
    return fmt::format("hierarchical all-reduce: {} (shared memory within a node, TCP ring among node leaders)",
                       hier_->layout());
  return "TCP ring";
}

WorkPtr ProcessGroupGloo::allreduce(Tensor t, ReduceOp op) {
  check_tensor("allreduce", t);
  check_avg("allreduce", op, t);
  return enqueue("allreduce", [this, t, op](const Task& task) {
    Tensor h = stage(t);
    allreduce_host(h, op, task.work->seq());
    if (op == ReduceOp::kAvg) h.div_(size_);
    unstage(t, h);
  });
}

WorkPtr ProcessGroupGloo::broadcast(Tensor t, int root) {
  check_tensor("broadcast", t);
  check_rank("broadcast", "root", root, size_);
  return enqueue("broadcast", [this, t, root](const Task& task) {
    Tensor h = stage(t);
    if (shm_) {
      shm_->broadcast(h.data_ptr(), static_cast<size_t>(h.numel()) * h.element_size(), root);
      unstage(t, h);
      return;
    }
    KILN_DISPATCH_ALL(h.dtype(), "broadcast", [&]<class T>() {
      gloo::BroadcastOptions o(context_);
      o.setOutput(static_cast<T*>(h.data_ptr()), static_cast<size_t>(h.numel()));
      o.setRoot(root);
      o.setTag(tag(task.work->seq()));
      o.setTimeout(timeout_);
      gloo::broadcast(o);
    });
    unstage(t, h);
  });
}

WorkPtr ProcessGroupGloo::reduce(Tensor t, int root, ReduceOp op) {
  check_tensor("reduce", t);
  check_rank("reduce", "root", root, size_);
  check_avg("reduce", op, t);
  return enqueue("reduce", [this, t, root, op](const Task& task) {
    Tensor h = stage(t);
    // Gloo's reduce leaves partial sums in non-root outputs: reduce a copy there.
    Tensor buf = rank_ == root ? h : h.clone();
    KILN_DISPATCH_ALL(h.dtype(), "reduce", [&]<class T>() {
      gloo::ReduceOptions o(context_);
      o.setOutput(static_cast<T*>(buf.data_ptr()), static_cast<size_t>(buf.numel()));
      o.setRoot(root);
      o.setReduceFunction(reducer<T>(op));
      o.setTag(tag(task.work->seq()));
      o.setTimeout(timeout_);
      gloo::reduce(o);
    });
    if (rank_ == root) {
      if (op == ReduceOp::kAvg) h.div_(size_);
      unstage(t, h);
    }
  });
}

WorkPtr ProcessGroupGloo::allgather(std::vector<Tensor> outputs, Tensor input) {
  check_tensor("allgather", input);
  KILN_CHECK(static_cast<int>(outputs.size()) == size_, "allgather: {} output tensors for a group of {} ranks",
             outputs.size(), size_);
  for (size_t r = 0; r < outputs.size(); ++r)
    KILN_CHECK(outputs[r].defined() && outputs[r].sizes() == input.sizes() && outputs[r].dtype() == input.dtype(),
               "allgather: output {} is {} {}, the input is {} {}", r,
               outputs[r].defined() ? outputs[r].shape_str() : "undefined",
               outputs[r].defined() ? dtype_name(outputs[r].dtype()) : "", input.shape_str(),
               dtype_name(input.dtype()));
  return enqueue("allgather", [this, outputs, input](const Task& task) {
    Tensor in = stage(input);
    Tensor all = empty({size_ * in.numel()}, dtype(in.dtype()));
    allgather_host(all, in, task.work->seq());
    for (int r = 0; r < size_; ++r)
      Tensor(outputs[r]).copy_(all.narrow(0, r * in.numel(), in.numel()).view(input.sizes()));
  });
}

void ProcessGroupGloo::allgather_host(const Tensor& all, const Tensor& in, uint64_t seq) {
  const int64_t n = in.numel();
  if (shm_) {  // every rank on this host: through the shared segment
    shm_->allgather(in.data_ptr(), static_cast<size_t>(n) * in.element_size(), all.data_ptr());
    return;
  }
  // Across hosts: Kiln's segmented ring (gloo_ring.h) keeps the link busy.
  Tensor(all).narrow(0, rank_ * n, n).copy_(in.reshape({n}));
  ring_allgather(*context_, all.data_ptr(), static_cast<size_t>(n) * in.element_size(), tag(seq), timeout_);
}

WorkPtr ProcessGroupGloo::allgather_into_tensor(Tensor output, Tensor input) {
  // Straight into a contiguous host output (ZeRO's buckets): no staging buffer of the result.
  const bool direct = output.defined() && input.defined() && output.device() == kCPU && output.is_contiguous() &&
                      output.dtype() == input.dtype() && output.numel() == input.numel() * size_;
  if (!direct) return ProcessGroup::allgather_into_tensor(std::move(output), std::move(input));
  return enqueue("allgather", [this, output, input](const Task& task) {
    allgather_host(output, stage(input), task.work->seq());
  });
}

WorkPtr ProcessGroupGloo::reduce_scatter(Tensor output, std::vector<Tensor> inputs, ReduceOp op) {
  check_tensor("reduce_scatter", output);
  check_avg("reduce_scatter", op, output);
  KILN_CHECK(static_cast<int>(inputs.size()) == size_, "reduce_scatter: {} input tensors for a group of {} ranks",
             inputs.size(), size_);
  for (size_t r = 0; r < inputs.size(); ++r)
    KILN_CHECK(inputs[r].defined() && inputs[r].sizes() == output.sizes() && inputs[r].dtype() == output.dtype(),
               "reduce_scatter: input {} does not match the output's shape {} and dtype {}", r, output.shape_str(),
               dtype_name(output.dtype()));
  // Over TCP a ring reduce-scatter built from Gloo's point-to-point buffers (gloo_ring.h). On one
  // host the shared-memory reduce-scatter (shm_allreduce.h): no network, and the reduction order
  // (hence the result) of the all-reduce data parallel uses.
  return enqueue("reduce_scatter", [this, output, inputs, op](const Task& task) {
    int64_t n = output.numel();
    Tensor all = empty({size_ * n}, dtype(output.dtype()));
    for (int r = 0; r < size_; ++r) all.narrow(0, r * n, n).copy_(inputs[r].reshape({n}));
    Tensor(output).copy_(reduce_scatter_host(all, op, task.work->seq()).view(output.sizes()));
  });
}

Tensor ProcessGroupGloo::reduce_scatter_host(const Tensor& all, ReduceOp op, uint64_t seq) {
  const int64_t n = all.numel() / size_;
  if (shm_) {
    KILN_DISPATCH_ALL(all.dtype(), "reduce_scatter", [&]<class T>() {
      shm_->reduce_scatter(all.data_ptr(), static_cast<size_t>(n), sizeof(T), reducer<T>(op));
    });
  } else {
    KILN_DISPATCH_ALL(all.dtype(), "reduce_scatter", [&]<class T>() {
      ring_reduce_scatter(*context_, all.data_ptr(), static_cast<size_t>(n), sizeof(T), reducer<T>(op), tag(seq),
                          timeout_);
    });
  }
  Tensor mine = all.narrow(0, rank_ * n, n);
  if (op == ReduceOp::kAvg) mine.div_(size_);
  return mine;
}

WorkPtr ProcessGroupGloo::reduce_scatter_tensor(Tensor output, Tensor input, ReduceOp op) {
  // The in-place form (output is chunk rank() of a contiguous host input, as ZeRO's buckets run
  // it) reduces the input itself: no staging copy of the whole buffer.
  const bool in_place = output.defined() && input.defined() && input.device() == kCPU && input.is_contiguous() &&
                        output.is_contiguous() && output.dtype() == input.dtype() &&
                        input.numel() == output.numel() * size_ &&
                        output.data_ptr() == input.reshape({input.numel()}).narrow(0, rank_ * output.numel(),
                                                                                    output.numel()).data_ptr();
  if (!in_place) return ProcessGroup::reduce_scatter_tensor(std::move(output), std::move(input), op);
  check_avg("reduce_scatter_tensor", op, output);
  return enqueue("reduce_scatter", [this, input, op](const Task& task) {
    reduce_scatter_host(input.reshape({input.numel()}), op, task.work->seq());
  });
}

// Sends and receives involve two ranks only: they are numbered apart from the collectives (which
// must carry the same sequence number, and Gloo tag, on every rank) and posted at once on the
// caller's thread; Gloo matches them per peer and tag in posting order.
WorkPtr ProcessGroupGloo::post_p2p(const char* op_name, Tensor t, int peer, int tag_, bool is_send) {
  check_tensor(op_name, t);
  check_rank(op_name, is_send ? "destination" : "source", peer, size_);
  KILN_CHECK(peer != rank_, "{}: rank {} cannot {} itself", op_name, rank_, is_send ? "send to" : "receive from");
  Tensor h = stage(t);
  const size_t bytes = static_cast<size_t>(h.numel()) * h.element_size();
  const uint64_t seq = ++next_p2p_seq_;
  if (p2p_ && p2p_->connects(peer)) {  // a peer on this node: through shared memory
    auto keep = std::make_shared<Tensor>(h);
    auto op = is_send ? p2p_->send(h.data_ptr(), bytes, peer, static_cast<uint64_t>(tag_), keep)
                      : p2p_->recv(h.data_ptr(), bytes, peer, static_cast<uint64_t>(tag_), keep);
    auto complete = [p2p = p2p_, op](Millis timeout) {
      p2p->wait(*op, timeout);
      return true;
    };
    return std::make_shared<P2PWork>(op_name, seq, rank_, peer, timeout_, std::move(t), h, complete, is_send);
  }
  std::shared_ptr<gloo::transport::UnboundBuffer> buf = context_->createUnboundBuffer(h.data_ptr(), bytes);
  auto complete = [buf, is_send](Millis timeout) { return is_send ? buf->waitSend(timeout) : buf->waitRecv(timeout); };
  auto work = std::make_shared<P2PWork>(op_name, seq, rank_, peer, timeout_, std::move(t), h, complete, is_send);
  try {
    if (is_send)
      buf->send(peer, static_cast<uint64_t>(tag_));
    else
      buf->recv(peer, static_cast<uint64_t>(tag_));
  } catch (const std::exception& e) {
    work->failed_to_post(e);
  }
  return work;
}

WorkPtr ProcessGroupGloo::send(Tensor t, int dst, int tag_) { return post_p2p("send", std::move(t), dst, tag_, true); }

WorkPtr ProcessGroupGloo::recv(Tensor t, int src, int tag_) { return post_p2p("recv", std::move(t), src, tag_, false); }

WorkPtr ProcessGroupGloo::barrier() {
  return enqueue("barrier", [this](const Task& task) {
    gloo::BarrierOptions o(context_);
    o.setTag(tag(task.work->seq()));
    o.setTimeout(timeout_);
    gloo::barrier(o);
  });
}

}  // namespace kiln::dist
