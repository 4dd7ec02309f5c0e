// The NCCL process group: a non-blocking communicator (set-up and every call polled with the
// group's timeout, aborted on failure), collectives on the group's stream, each inside
// ncclGroupStart/End, and a destructor that gives up on a dead peer instead of hanging. A failed
// call throws dist::TimeoutError (the timeout passed), dist::PeerError (ncclRemoteError: a peer
// exited, aborted or lost its network) or kiln::Error, naming the NCCL call and NCCL's error
// string (nccl_progress.h decides which).
#include "distributed/backend/nccl_backend.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/grad_mode.h"
#include "core/ops.h"
#include "cuda/device.h"
#include "cuda/error.h"
#include "cuda/stream.h"
#include "distributed/backend/init.h"
#include "distributed/backend/nccl_progress.h"

namespace kiln::dist {
namespace {

static_assert(ncclSuccess == kNcclSuccess && ncclInvalidUsage == kNcclInvalidUsage &&
                  ncclRemoteError == kNcclRemoteError && ncclInProgress == kNcclInProgress,
              "nccl_progress.h's ncclResult_t codes differ from this nccl.h");

/// "ncclAllReduce: NCCL error 6 (remote process exited or there was a network error)".
std::string nccl_error_text(const char* call, ncclResult_t r) {
  return fmt::format("{}: NCCL error {} ({})", call, static_cast<int>(r), ncclGetErrorString(r));
}

ncclDataType_t nccl_type(DType t, const char* op) {
  switch (t) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::f16: return ncclFloat16;
    case DType::bf16: return ncclBfloat16;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    case DType::b8: return ncclUint8;
  }
  fail("{}: dtype {} has no NCCL type", op, t);
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kAvg: return ncclAvg;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kMin: return ncclMin;
  }
  fail("NCCL: reduce op {} is unknown", static_cast<int>(op));
}

}  // namespace

struct ProcessGroupNCCL::Impl {
  int device = 0;
  ncclComm_t comm = nullptr;
  cuda::OwnedStream stream;
  std::unique_ptr<ArrivalLog> arrivals;
  uint64_t next_seq = 0;
  Millis timeout;

  Impl(int dev, Millis t) : device(dev), stream(dev, /*priority=*/-1), timeout(t) {}

  /// Aborts the communicator (at most once): what a failed or timed-out call leaves.
  void abort() {
    if (comm != nullptr) ncclCommAbort(comm);
    comm = nullptr;
  }

  /// The communicator's state as a poll step: ncclInProgress while a non-blocking call runs.
  Progress state(ncclResult_t* async) const {
    *async = ncclSuccess;
    if (ncclCommGetAsyncError(comm, async) != ncclSuccess) *async = ncclInternalError;
    return *async == ncclInProgress ? Progress::kPending : *async == ncclSuccess ? Progress::kDone : Progress::kFailed;
  }

  /// Completes `call` (an NCCL function's name) on the non-blocking communicator: `r` (what it
  /// returned) in progress is polled until it settles; an error or the timeout aborts the
  /// communicator and throws the typed error (TimeoutError, PeerError, else Error).
  void settle(ncclResult_t r, const std::string& what, const char* call) {
    ncclResult_t async = r;
    Progress p = r == ncclSuccess ? Progress::kDone : r == ncclInProgress ? Progress::kPending : Progress::kFailed;
    if (p == Progress::kPending && comm != nullptr) p = poll_until_settled([&] { return state(&async); }, timeout);
    if (p == Progress::kDone) return;
    const std::string cause =
        p == Progress::kPending
            ? fmt::format("{} not done after the group's timeout of {} ms", call, timeout.count())
            : fmt::format("{} ({})", nccl_error_text(call, async),
                          comm != nullptr ? ncclGetLastError(comm) : "no communicator");
    abort();
    throw_nccl_failure(classify_nccl_failure(p, async),
                       fmt::format("{}: {}; the communicator was aborted", what, cause));
  }
};

namespace {

// One collective on the group's stream. Holds its tensors until the collective is known to be
// done, so the caching allocator cannot hand their memory out while NCCL still uses it.
class NcclWork final : public Work {
 public:
  NcclWork(std::string name, uint64_t seq, ProcessGroupNCCL::Impl& g, std::vector<Tensor> keep)
      : Work(std::move(name), seq), g_(g), keep_(std::move(keep)), timeout_(g.timeout) {}
  ~NcclWork() override {
    // The tensors are released only once the collective is done with them; a collective stuck on
    // a dead peer is given up after the timeout and its tensors leaked, never reused under it.
    auto step = [&] {
      try {
        return done_event_.query() ? Progress::kDone : Progress::kPending;
      } catch (const std::exception&) {
        return Progress::kFailed;
      }
    };
    if (poll_until_settled(step, timeout_, std::chrono::microseconds(200)) == Progress::kDone) return;
    std::fprintf(stderr, "kiln NCCL: %s #%llu did not finish within %lld ms; its %zu tensors are leaked\n",
                 name().c_str(), static_cast<unsigned long long>(seq()), static_cast<long long>(timeout_.count()),
                 keep_.size());
    new std::vector<Tensor>(std::move(keep_));  // deliberately never freed
  }

  cuda::Event& done_event() { return done_event_; }

  bool is_completed() const override { return done_event_.query(); }

  void wait() override {
    // Poll, so a collective that never ends (a peer died) fails after the timeout instead of
    // hanging the host forever; the communicator is then aborted.
    const auto start = Clock::now();
    while (!done_event_.query()) {
      ncclResult_t async = ncclSuccess;
      if (g_.comm != nullptr) g_.state(&async);
      if (g_.comm == nullptr) async = ncclInvalidUsage;  // aborted by another failure meanwhile
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      const bool failed = async != ncclSuccess && async != ncclInProgress;
      if (failed || Clock::now() - start > g_.timeout) {
        std::string cause = async == ncclInvalidUsage && g_.comm == nullptr
                                ? std::string("the communicator was aborted by an earlier failure")
                            : failed ? nccl_error_text("ncclCommGetAsyncError", async)
                                     : fmt::format("timed out after {} ms", g_.timeout.count());
        g_.abort();
        throw_nccl_failure(classify_nccl_failure(failed ? Progress::kFailed : Progress::kPending, async),
                           g_.arrivals->describe_failure(name(), seq(), seconds, cause));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    // The caller's stream is ordered after the collective; the host goes on.
    cuda::current_stream(g_.device).wait(done_event_);
    finish();
  }

 private:
  ProcessGroupNCCL::Impl& g_;
  std::vector<Tensor> keep_;
  Millis timeout_;
  cuda::Event done_event_;
};

void check_cuda_tensor(const char* op, const Tensor& t, int device) {
  KILN_CHECK(t.defined(), "{}: the tensor is undefined", op);
  KILN_CHECK(t.is_cuda() && t.device().index == device, "{}: the NCCL group runs on cuda:{}, the tensor is on {}", op,
             device, t.device().str());
  KILN_CHECK(t.is_contiguous(), "{}: NCCL needs a contiguous tensor (call .contiguous() and copy back)", op);
}

}  // namespace

ProcessGroupNCCL::ProcessGroupNCCL(std::shared_ptr<Store> store, int rank, int size, Millis timeout)
    : ProcessGroup(rank, size, timeout), store_(std::move(store)) {
  KILN_CHECK(cuda::device_count() > 0, "ProcessGroupNCCL: no CUDA device");
  // One GPU per rank of the node: LOCAL_RANK's (as the launcher sets it), else the current one.
  int device = cuda::current_device();
  if (const char* local = std::getenv("LOCAL_RANK")) device = std::atoi(local);
  KILN_CHECK(device >= 0 && device < cuda::device_count(),
             "ProcessGroupNCCL: LOCAL_RANK {} has no GPU of its own ({} CUDA devices)", device, cuda::device_count());
  cuda::set_device(device);
  impl_ = std::make_unique<Impl>(device, timeout);
  cuda::DeviceGuard guard(impl_->device);
  ncclUniqueId id;
  // A prefix of this group's own: a second NCCL group must not read the first one's id.
  const std::string prefix = next_nccl_group_prefix();
  auto ids = std::make_shared<PrefixStore>(prefix, store_);
  if (rank == 0) {
    const ncclResult_t got = ncclGetUniqueId(&id);
    if (got != ncclSuccess)
      throw_nccl_failure(classify_nccl_failure(Progress::kFailed, got),
                         fmt::format("ProcessGroupNCCL: {}", nccl_error_text("ncclGetUniqueId", got)));
    ids->set("unique_id", Bytes(reinterpret_cast<uint8_t*>(&id), reinterpret_cast<uint8_t*>(&id) + sizeof id));
  } else {
    Bytes b = ids->get("unique_id");
    KILN_CHECK(b.size() == sizeof id, "ProcessGroupNCCL: the unique id in the store has {} bytes, expected {}",
               b.size(), sizeof id);
    std::memcpy(&id, b.data(), sizeof id);
  }
  // Non-blocking, so a peer that never joins fails the set-up after the timeout instead of
  // hanging it.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  const ncclResult_t r = ncclCommInitRankConfig(&impl_->comm, size, id, rank, &config);
  impl_->settle(r, fmt::format("ProcessGroupNCCL: set-up (rank {} of {}, cuda:{}, store prefix {})", rank, size,
                               impl_->device, prefix),
                "ncclCommInitRankConfig");
  impl_->arrivals = std::make_unique<ArrivalLog>(std::make_shared<PrefixStore>(prefix + "/progress", store_), rank,
                                                 size, std::min<Millis>(timeout, std::chrono::seconds(30)));
}

ProcessGroupNCCL::~ProcessGroupNCCL() {
  if (!impl_ || impl_->comm == nullptr) return;
  // Finalize (flush, then destroy) once the group's stream is idle; a collective stuck on a dead
  // peer, or a finalize that does not settle, is given up after a bounded wait and aborted.
  const Millis patience = std::min<Millis>(impl_->timeout, std::chrono::seconds(30));
  try {
    cuda::DeviceGuard guard(impl_->device);
    auto idle = [&] { return impl_->stream.stream().query() ? Progress::kDone : Progress::kPending; };
    if (poll_until_settled(idle, patience, std::chrono::microseconds(200)) == Progress::kDone) {
      ncclResult_t async = ncclCommFinalize(impl_->comm);
      Progress p = async == ncclSuccess ? Progress::kDone : async == ncclInProgress ? Progress::kPending
                                                                                     : Progress::kFailed;
      if (p == Progress::kPending) p = poll_until_settled([&] { return impl_->state(&async); }, patience);
      if (p == Progress::kDone) {
        ncclCommDestroy(impl_->comm);
        impl_->comm = nullptr;
        return;
      }
    }
    std::fprintf(stderr, "kiln NCCL: the group's work did not finish within %lld ms; aborting the communicator\n",
                 static_cast<long long>(patience.count()));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln NCCL: closing the group failed (%s); aborting the communicator\n", e.what());
  }
  impl_->abort();
}

namespace {

/// Orders the group's stream after the caller's current stream, issues `launch`'s NCCL calls
/// (`calls`, their names for errors) on it inside one ncclGroupStart/End (so paired sends and
/// receives progress together), settles them on the non-blocking communicator, queues `after`
/// (work on the result) on the same stream and records the Work's completion event.
WorkPtr run(ProcessGroupNCCL::Impl& g, const char* name, const char* calls, std::vector<Tensor> keep,
            const std::function<ncclResult_t(cudaStream_t)>& launch, const std::function<void()>& after = {}) {
  KILN_CHECK(g.comm != nullptr, "{}: the NCCL communicator was aborted by an earlier failure", name);
  cuda::DeviceGuard guard(g.device);
  auto work = std::make_shared<NcclWork>(name, ++g.next_seq, g, std::move(keep));
  cuda::Event ready;
  ready.record(cuda::current_stream(g.device));
  g.stream.stream().wait(ready);
  work->mark_started();
  g.arrivals->entered(work->seq());
  g.settle(ncclGroupStart(), name, "ncclGroupStart");
  const ncclResult_t issued = launch(reinterpret_cast<cudaStream_t>(g.stream.stream().raw()));
  const ncclResult_t ended = ncclGroupEnd();
  const bool issue_failed = issued != ncclSuccess && issued != ncclInProgress;
  g.settle(issue_failed ? issued : ended, fmt::format("{} #{} on cuda:{}", name, work->seq(), g.device),
           issue_failed ? calls : "ncclGroupEnd");
  if (after) {
    cuda::StreamGuard on_group(g.stream.stream());
    after();
  }
  work->done_event().record(g.stream.stream());
  return work;
}

/// A collective run on device copies of host tensors: done when the collective is; wait() also
/// copies each device result back into its host tensor (once).
class HostStagedWork final : public Work {
 public:
  /// `back`: (host, device) pairs, the device tensor's result to be copied into the host one.
  HostStagedWork(WorkPtr inner, std::vector<std::pair<Tensor, Tensor>> back)
      : Work(inner->name(), inner->seq()), inner_(std::move(inner)), back_(std::move(back)) {}
  bool is_completed() const override { return inner_->is_completed(); }
  void wait() override {
    inner_->wait();  // the caller's stream is now ordered after the collective
    std::lock_guard<std::mutex> lock(mu_);
    if (!done_) {
      NoGradGuard no_grad;
      for (auto& [host, device] : back_) host.copy_(device);  // device -> pageable host: synchronous
    }
    started_ = inner_->started();
    finished_ = inner_->finished();
    done_ = true;
  }

 private:
  WorkPtr inner_;
  std::vector<std::pair<Tensor, Tensor>> back_;
};

}  // namespace

// Types and ops are worked out before run(): nothing may throw between ncclGroupStart and End.

WorkPtr ProcessGroupNCCL::staged(const char* name, Tensor t, bool copy_back,
                                 const std::function<WorkPtr(Tensor)>& op) {
  KILN_CHECK(!copy_back || t.is_contiguous(), "{}: a host tensor must be contiguous (call .contiguous() and copy back)",
             name);
  NoGradGuard no_grad;
  Tensor d = t.to(Device(DeviceType::CUDA, impl_->device));
  WorkPtr w = op(d);
  std::vector<std::pair<Tensor, Tensor>> back;
  if (copy_back) back.emplace_back(t, d);
  return std::make_shared<HostStagedWork>(std::move(w), std::move(back));
}

WorkPtr ProcessGroupNCCL::allreduce(Tensor t, ReduceOp op) {
  if (t.defined() && t.device().is_cpu())
    return staged("allreduce", t, true, [&](Tensor d) { return allreduce(d, op); });
  check_cuda_tensor("allreduce", t, impl_->device);
  const ncclDataType_t type = nccl_type(t.dtype(), "allreduce");
  const ncclRedOp_t red = nccl_op(op);
  return run(*impl_, "allreduce", "ncclAllReduce", {t}, [&](cudaStream_t s) {
    return ncclAllReduce(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), type, red, impl_->comm, s);
  });
}

WorkPtr ProcessGroupNCCL::broadcast(Tensor t, int root) {
  if (t.defined() && t.device().is_cpu())
    return staged("broadcast", t, true, [&](Tensor d) { return broadcast(d, root); });
  check_cuda_tensor("broadcast", t, impl_->device);
  KILN_CHECK(root >= 0 && root < size_, "broadcast: root {} is out of range for a group of {} ranks", root, size_);
  const ncclDataType_t type = nccl_type(t.dtype(), "broadcast");
  return run(*impl_, "broadcast", "ncclBroadcast", {t}, [&](cudaStream_t s) {
    return ncclBroadcast(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), type, root, impl_->comm, s);
  });
}

WorkPtr ProcessGroupNCCL::reduce(Tensor t, int root, ReduceOp op) {
  if (t.defined() && t.device().is_cpu())
    return staged("reduce", t, rank_ == root, [&](Tensor d) { return reduce(d, root, op); });
  check_cuda_tensor("reduce", t, impl_->device);
  KILN_CHECK(root >= 0 && root < size_, "reduce: root {} is out of range for a group of {} ranks", root, size_);
  const ncclDataType_t type = nccl_type(t.dtype(), "reduce");
  const ncclRedOp_t red = nccl_op(op);
  return run(*impl_, "reduce", "ncclReduce", {t}, [&](cudaStream_t s) {
    return ncclReduce(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), type, red, root, impl_->comm, s);
  });
}

WorkPtr ProcessGroupNCCL::allgather(std::vector<Tensor> outputs, Tensor input) {
  if (input.defined() && input.device().is_cpu()) {  // host tensors: gathered on device copies
    NoGradGuard no_grad;
    const Device dev(DeviceType::CUDA, impl_->device);
    std::vector<Tensor> on_device;
    std::vector<std::pair<Tensor, Tensor>> back;
    for (const Tensor& o : outputs) {
      KILN_CHECK(o.defined() && o.device().is_cpu() && o.is_contiguous(),
                 "allgather: a host input needs contiguous host outputs (one is {})",
                 o.defined() ? o.device().str() : "undefined");
      on_device.push_back(empty(o.sizes(), TensorOptions().dtype(o.dtype()).device(dev)));
      back.emplace_back(o, on_device.back());
    }
    WorkPtr w = allgather(on_device, input.to(dev));
    return std::make_shared<HostStagedWork>(std::move(w), std::move(back));
  }
  check_cuda_tensor("allgather", input, impl_->device);
  KILN_CHECK(static_cast<int>(outputs.size()) == size_, "allgather: {} output tensors for a group of {} ranks",
             outputs.size(), size_);
  for (auto& o : outputs) check_cuda_tensor("allgather", o, impl_->device);
  const ncclDataType_t type = nccl_type(input.dtype(), "allgather");
  Tensor flat = empty({size_ * input.numel()}, TensorOptions().dtype(input.dtype()).device(input.device()));
  std::vector<Tensor> keep = outputs;
  keep.push_back(input);
  keep.push_back(flat);
  return run(
      *impl_, "allgather", "ncclAllGather", keep,
      [&](cudaStream_t s) {
        return ncclAllGather(input.data_ptr(), flat.data_ptr(), static_cast<size_t>(input.numel()), type,
                             impl_->comm, s);
      },
      [&] {  // the copies out, on the group's stream after the gather
        NoGradGuard no_grad;
        for (int r = 0; r < size_; ++r)
          outputs[r].copy_(flat.narrow(0, r * input.numel(), input.numel()).view(input.sizes()));
      });
}

WorkPtr ProcessGroupNCCL::reduce_scatter(Tensor output, std::vector<Tensor> inputs, ReduceOp op) {
  check_cuda_tensor("reduce_scatter", output, impl_->device);
  KILN_CHECK(static_cast<int>(inputs.size()) == size_, "reduce_scatter: {} input tensors for a group of {} ranks",
             inputs.size(), size_);
  const ncclDataType_t type = nccl_type(output.dtype(), "reduce_scatter");
  const ncclRedOp_t red = nccl_op(op);
  const int64_t n = output.numel();
  Tensor flat = empty({size_ * n}, TensorOptions().dtype(output.dtype()).device(output.device()));
  {
    NoGradGuard no_grad;  // packed on the caller's stream, which the collective waits for
    for (int r = 0; r < size_; ++r) flat.narrow(0, r * n, n).copy_(inputs[r].reshape({n}));
  }
  return run(*impl_, "reduce_scatter", "ncclReduceScatter", {output, flat}, [&](cudaStream_t s) {
    return ncclReduceScatter(flat.data_ptr(), output.data_ptr(), static_cast<size_t>(n), type, red, impl_->comm, s);
  });
}

WorkPtr ProcessGroupNCCL::reduce_scatter_tensor(Tensor output, Tensor input, ReduceOp op) {
  check_cuda_tensor("reduce_scatter_tensor", output, impl_->device);
  check_cuda_tensor("reduce_scatter_tensor", input, impl_->device);
  KILN_CHECK(input.dtype() == output.dtype() && input.numel() == output.numel() * size_,
             "reduce_scatter_tensor: input {} {} does not hold {} chunks of the output's {} {}", input.shape_str(),
             input.dtype(), size_, output.shape_str(), output.dtype());
  const ncclDataType_t type = nccl_type(output.dtype(), "reduce_scatter_tensor");
  const ncclRedOp_t red = nccl_op(op);
  return run(*impl_, "reduce_scatter_tensor", "ncclReduceScatter", {output, input}, [&](cudaStream_t s) {
    return ncclReduceScatter(input.data_ptr(), output.data_ptr(), static_cast<size_t>(output.numel()), type, red,
                             impl_->comm, s);
  });
}

WorkPtr ProcessGroupNCCL::allgather_into_tensor(Tensor output, Tensor input) {
  check_cuda_tensor("allgather_into_tensor", output, impl_->device);
  check_cuda_tensor("allgather_into_tensor", input, impl_->device);
  KILN_CHECK(input.dtype() == output.dtype() && output.numel() == input.numel() * size_,
             "allgather_into_tensor: output {} {} does not hold {} chunks of the input's {} {}", output.shape_str(),
             output.dtype(), size_, input.shape_str(), input.dtype());
  const ncclDataType_t type = nccl_type(input.dtype(), "allgather_into_tensor");
  return run(*impl_, "allgather_into_tensor", "ncclAllGather", {output, input}, [&](cudaStream_t s) {
    return ncclAllGather(input.data_ptr(), output.data_ptr(), static_cast<size_t>(input.numel()), type, impl_->comm,
                         s);
  });
}

void ProcessGroupNCCL::check_peer(const char* op, const Tensor& t, int peer) const {
  check_cuda_tensor(op, t, impl_->device);
  KILN_CHECK(peer >= 0 && peer < size_ && peer != rank_, "{}: peer {} is invalid for rank {} of {}", op, peer, rank_,
             size_);
}

WorkPtr ProcessGroupNCCL::send(Tensor t, int dst, int tag) {
  if (t.defined() && t.device().is_cpu())
    return staged("send", t, false, [&](Tensor d) { return send(d, dst, tag); });
  check_peer("send", t, dst);
  const ncclDataType_t type = nccl_type(t.dtype(), "send");
  return run(*impl_, "send", "ncclSend", {t}, [&](cudaStream_t s) {
    return ncclSend(t.data_ptr(), static_cast<size_t>(t.numel()), type, dst, impl_->comm, s);
  });
}

WorkPtr ProcessGroupNCCL::recv(Tensor t, int src, int tag) {
  if (t.defined() && t.device().is_cpu())
    return staged("recv", t, true, [&](Tensor d) { return recv(d, src, tag); });
  check_peer("recv", t, src);
  const ncclDataType_t type = nccl_type(t.dtype(), "recv");
  return run(*impl_, "recv", "ncclRecv", {t}, [&](cudaStream_t s) {
    return ncclRecv(t.data_ptr(), static_cast<size_t>(t.numel()), type, src, impl_->comm, s);
  });
}

WorkPtr ProcessGroupNCCL::send_recv(Tensor send_t, int dst, Tensor recv_t, int src) {
  check_peer("send_recv", send_t, dst);
  check_peer("send_recv", recv_t, src);
  const ncclDataType_t send_type = nccl_type(send_t.dtype(), "send_recv");
  const ncclDataType_t recv_type = nccl_type(recv_t.dtype(), "send_recv");
  return run(*impl_, "send_recv", "ncclSend/ncclRecv", {send_t, recv_t}, [&](cudaStream_t s) {
    // One group: the send and the receive progress together, so two ranks exchanging (each
    // sending to the other) do not wait on each other's unposted receive.
    const ncclResult_t r = ncclSend(send_t.data_ptr(), static_cast<size_t>(send_t.numel()), send_type, dst,
                                    impl_->comm, s);
    if (r != ncclSuccess && r != ncclInProgress) return r;
    return ncclRecv(recv_t.data_ptr(), static_cast<size_t>(recv_t.numel()), recv_type, src, impl_->comm, s);
  });
}

WorkPtr ProcessGroupNCCL::barrier() {
  Tensor one = ones({1}, TensorOptions().device(Device(DeviceType::CUDA, impl_->device)));
  WorkPtr w = allreduce(one, ReduceOp::kSum);
  return w;
}

// Linking this library makes init_process_group({.backend = "nccl"}) work.
[[maybe_unused]] const bool kRegistered = [] {
  register_backend("nccl", [](std::shared_ptr<Store> store, int rank, int size, Millis timeout) {
    return std::make_shared<ProcessGroupNCCL>(std::move(store), rank, size, timeout);
  });
  return true;
}();

}  // namespace kiln::dist
