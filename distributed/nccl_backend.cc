#include "distributed/nccl_backend.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>

#include "core/error.h"
#include "core/grad_mode.h"
#include "core/ops.h"
#include "cuda/device.h"
#include "cuda/error.h"
#include "cuda/stream.h"
#include "distributed/init.h"

namespace kiln::dist {
namespace {

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
};

namespace {

// One collective on the group's stream. Holds its tensors until the collective is known to be
// done, so the caching allocator cannot hand their memory out while NCCL still uses it.
class NcclWork final : public Work {
 public:
  NcclWork(std::string name, uint64_t seq, ProcessGroupNCCL::Impl& g, std::vector<Tensor> keep)
      : Work(std::move(name), seq), g_(g), keep_(std::move(keep)) {}
  ~NcclWork() override {
    if (done_event_.recorded()) {
      try {
        done_event_.synchronize();
      } catch (const std::exception&) {
      }
    }
  }

  cuda::Event& done_event() { return done_event_; }

  bool is_completed() const override { return done_event_.query(); }

  void wait() override {
    // Poll, so a collective that never ends (a peer died) fails after the timeout instead of
    // hanging the host forever; the communicator is then aborted.
    const auto start = Clock::now();
    while (!done_event_.query()) {
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(g_.comm, &async);
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      if (async != ncclSuccess || Clock::now() - start > g_.timeout) {
        std::string cause = async != ncclSuccess ? fmt::format("NCCL error: {}", ncclGetErrorString(async))
                                                 : fmt::format("timed out after {} ms", g_.timeout.count());
        ncclCommAbort(g_.comm);
        g_.comm = nullptr;
        fail("{}", g_.arrivals->describe_failure(name(), seq(), seconds, cause));
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
  auto ids = std::make_shared<PrefixStore>("nccl", store_);
  if (rank == 0) {
    KILN_NCCL_CHECK(ncclGetUniqueId(&id));
    ids->set("unique_id", Bytes(reinterpret_cast<uint8_t*>(&id), reinterpret_cast<uint8_t*>(&id) + sizeof id));
  } else {
    Bytes b = ids->get("unique_id");
    KILN_CHECK(b.size() == sizeof id, "ProcessGroupNCCL: the unique id in the store has {} bytes, expected {}",
               b.size(), sizeof id);
    std::memcpy(&id, b.data(), sizeof id);
  }
  KILN_NCCL_CHECK(ncclCommInitRank(&impl_->comm, size, id, rank));
  impl_->arrivals = std::make_unique<ArrivalLog>(std::make_shared<PrefixStore>("progress_nccl", store_), rank, size,
                                                 std::min<Millis>(timeout, std::chrono::seconds(30)));
}

ProcessGroupNCCL::~ProcessGroupNCCL() {
  if (impl_ && impl_->comm) {
    cuda::DeviceGuard guard(impl_->device);
    impl_->stream.stream().synchronize();
    ncclCommDestroy(impl_->comm);
  }
}

namespace {

/// Orders the group's stream after the caller's current stream, runs `launch` on it and records
/// the Work's completion event.
WorkPtr run(ProcessGroupNCCL::Impl& g, const char* name, std::vector<Tensor> keep,
            const std::function<void(cudaStream_t)>& launch) {
  KILN_CHECK(g.comm != nullptr, "{}: the NCCL communicator was aborted by an earlier failure", name);
  cuda::DeviceGuard guard(g.device);
  auto work = std::make_shared<NcclWork>(name, ++g.next_seq, g, std::move(keep));
  cuda::Event ready;
  ready.record(cuda::current_stream(g.device));
  g.stream.stream().wait(ready);
  work->mark_started();
  g.arrivals->entered(work->seq());
  launch(reinterpret_cast<cudaStream_t>(g.stream.stream().raw()));
  work->done_event().record(g.stream.stream());
  return work;
}

}  // namespace

WorkPtr ProcessGroupNCCL::allreduce(Tensor t, ReduceOp op) {
  check_cuda_tensor("allreduce", t, impl_->device);
  return run(*impl_, "allreduce", {t}, [&](cudaStream_t s) {
    KILN_NCCL_CHECK(ncclAllReduce(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()),
                                  nccl_type(t.dtype(), "allreduce"), nccl_op(op), impl_->comm, s));
  });
}

WorkPtr ProcessGroupNCCL::broadcast(Tensor t, int root) {
  check_cuda_tensor("broadcast", t, impl_->device);
  KILN_CHECK(root >= 0 && root < size_, "broadcast: root {} is out of range for a group of {} ranks", root, size_);
  return run(*impl_, "broadcast", {t}, [&](cudaStream_t s) {
    KILN_NCCL_CHECK(ncclBroadcast(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()),
                                  nccl_type(t.dtype(), "broadcast"), root, impl_->comm, s));
  });
}

WorkPtr ProcessGroupNCCL::reduce(Tensor t, int root, ReduceOp op) {
  check_cuda_tensor("reduce", t, impl_->device);
  KILN_CHECK(root >= 0 && root < size_, "reduce: root {} is out of range for a group of {} ranks", root, size_);
  return run(*impl_, "reduce", {t}, [&](cudaStream_t s) {
    KILN_NCCL_CHECK(ncclReduce(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()),
                               nccl_type(t.dtype(), "reduce"), nccl_op(op), root, impl_->comm, s));
  });
}

WorkPtr ProcessGroupNCCL::allgather(std::vector<Tensor> outputs, Tensor input) {
  check_cuda_tensor("allgather", input, impl_->device);
  KILN_CHECK(static_cast<int>(outputs.size()) == size_, "allgather: {} output tensors for a group of {} ranks",
             outputs.size(), size_);
  for (auto& o : outputs) check_cuda_tensor("allgather", o, impl_->device);
  Tensor flat = empty({size_ * input.numel()}, TensorOptions().dtype(input.dtype()).device(input.device()));
  std::vector<Tensor> keep = outputs;
  keep.push_back(input);
  keep.push_back(flat);
  return run(*impl_, "allgather", keep, [&](cudaStream_t s) {
    KILN_NCCL_CHECK(ncclAllGather(input.data_ptr(), flat.data_ptr(), static_cast<size_t>(input.numel()),
                                  nccl_type(input.dtype(), "allgather"), impl_->comm, s));
    // The copies out run on the group's stream too (the current stream is the group's here).
    cuda::StreamGuard on_group(impl_->stream.stream());
    NoGradGuard no_grad;
    for (int r = 0; r < size_; ++r) outputs[r].copy_(flat.narrow(0, r * input.numel(), input.numel()).view(input.sizes()));
  });
}

WorkPtr ProcessGroupNCCL::reduce_scatter(Tensor output, std::vector<Tensor> inputs, ReduceOp op) {
  check_cuda_tensor("reduce_scatter", output, impl_->device);
  KILN_CHECK(static_cast<int>(inputs.size()) == size_, "reduce_scatter: {} input tensors for a group of {} ranks",
             inputs.size(), size_);
  const int64_t n = output.numel();
  Tensor flat = empty({size_ * n}, TensorOptions().dtype(output.dtype()).device(output.device()));
  {
    NoGradGuard no_grad;  // packed on the caller's stream, which the collective waits for
    for (int r = 0; r < size_; ++r) flat.narrow(0, r * n, n).copy_(inputs[r].reshape({n}));
  }
  return run(*impl_, "reduce_scatter", {output, flat}, [&](cudaStream_t s) {
    KILN_NCCL_CHECK(ncclReduceScatter(flat.data_ptr(), output.data_ptr(), static_cast<size_t>(n),
                                      nccl_type(output.dtype(), "reduce_scatter"), nccl_op(op), impl_->comm, s));
  });
}

WorkPtr ProcessGroupNCCL::send(Tensor t, int dst, int /*tag*/) {
  check_cuda_tensor("send", t, impl_->device);
  KILN_CHECK(dst >= 0 && dst < size_ && dst != rank_, "send: destination {} is invalid for rank {} of {}", dst, rank_,
             size_);
  return run(*impl_, "send", {t}, [&](cudaStream_t s) {
    KILN_NCCL_CHECK(ncclSend(t.data_ptr(), static_cast<size_t>(t.numel()), nccl_type(t.dtype(), "send"), dst,
                             impl_->comm, s));
  });
}

WorkPtr ProcessGroupNCCL::recv(Tensor t, int src, int /*tag*/) {
  check_cuda_tensor("recv", t, impl_->device);
  KILN_CHECK(src >= 0 && src < size_ && src != rank_, "recv: source {} is invalid for rank {} of {}", src, rank_,
             size_);
  return run(*impl_, "recv", {t}, [&](cudaStream_t s) {
    KILN_NCCL_CHECK(ncclRecv(t.data_ptr(), static_cast<size_t>(t.numel()), nccl_type(t.dtype(), "recv"), src,
                             impl_->comm, s));
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
