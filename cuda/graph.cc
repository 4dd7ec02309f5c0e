// kiln::cuda::Graph on cudaStreamBeginCapture (thread-local mode: only this thread's illegal calls
// break the capture), cudaStreamEndCapture, cudaGraphInstantiate and cudaGraphLaunch, with the
// caching allocator's private pool opened for the capture and released with the graph. Also the
// CUDA factory behind core's make_device_graph.
#include "cuda/graph.h"

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <mutex>
#include <vector>

#include "core/device_graph.h"
#include "cuda/allocator.h"
#include "cuda/device.h"
#include "cuda/error.h"

namespace kiln::cuda {

bool is_capturing(const Stream& stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  KILN_CUDA_CHECK(cudaStreamIsCapturing(stream.raw(), &status));
  return status != cudaStreamCaptureStatusNone;
}

RelaxedCaptureGuard::RelaxedCaptureGuard() {
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  KILN_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
  previous_ = static_cast<int>(mode);
}

RelaxedCaptureGuard::~RelaxedCaptureGuard() {
  auto mode = static_cast<cudaStreamCaptureMode>(previous_);
  cudaThreadExchangeStreamCaptureMode(&mode);  // cannot fail for a mode it handed out
}

namespace {
PoolId next_pool_id() {
  static std::atomic<PoolId> next{1};
  return next++;
}
}  // namespace

Graph::Graph(int device) : device_(device < 0 ? current_device() : device), pool_(next_pool_id()) {
  KILN_CHECK(device_ < device_count(), "cuda::Graph: device cuda:{} does not exist ({} CUDA devices present)", device_,
             device_count());
}

Stream Graph::capture_stream(int device) {
  // Never destroyed (graphs may outlive static destructors); one per device, so cuBLAS's
  // per-stream workspaces (cuda/blas.cc) stay few however many graphs are captured.
  static std::mutex mu;
  static auto* streams = new std::vector<std::unique_ptr<OwnedStream>>(device_count());
  std::lock_guard<std::mutex> g(mu);
  auto& s = streams->at(device);
  if (!s) s = std::make_unique<OwnedStream>(device);
  return s->stream();
}

void Graph::capture_begin() {
  KILN_CHECK(!capturing_ && !captured() && !pool_open_,
             "cuda::Graph::capture_begin on cuda:{}: this graph was already captured, or its capture failed (one "
             "capture per graph: make a new Graph)",
             device_);
  const Stream stream = capture_stream(device_);
  // The previous current stream's queued work (warm-up steps, input copies) comes first.
  Event ready;
  ready.record(current_stream(device_));
  stream.wait(ready);
  detail::begin_private_pool(device_, pool_, stream);
  pool_open_ = true;
  guard_.emplace(stream);
  capturing_ = true;
  const cudaError_t e = cudaStreamBeginCapture(stream.raw(), cudaStreamCaptureModeThreadLocal);
  if (e != cudaSuccess) {
    capturing_ = false;
    guard_.reset();
    detail::end_private_pool(device_, pool_);
    KILN_CUDA_CHECK(e);
  }
}

void Graph::capture_end() {
  KILN_CHECK(capturing_, "cuda::Graph::capture_end on cuda:{} without capture_begin", device_);
  const Stream stream = capture_stream(device_);
  cudaGraph_t graph = nullptr;
  const cudaError_t e = cudaStreamEndCapture(stream.raw(), &graph);
  capturing_ = false;
  guard_.reset();
  detail::end_private_pool(device_, pool_);
  if (e == cudaErrorStreamCaptureInvalidated) {
    cudaGetLastError();
    if (graph != nullptr) cudaGraphDestroy(graph);
    fail("cuda::Graph capture on cuda:{} was invalidated: an operation that is illegal during a capture ran inside "
         "it (a host synchronisation, a copy to or from the host such as .item(), a cudaMalloc outside the caching "
         "allocator, or work on the legacy default stream)",
         device_);
  }
  KILN_CUDA_CHECK(e);
  graph_ = graph;
  cudaGraphExec_t exec = nullptr;
  KILN_CUDA_CHECK(cudaGraphInstantiate(&exec, graph_, 0));
  exec_ = exec;
  // Uploads the graph's work descriptors now, so the first replay costs what the others do; on the
  // stream replays will most likely use (the current one again), which orders them after it.
  KILN_CUDA_CHECK(cudaGraphUpload(exec_, current_stream(device_).raw()));
}

void Graph::capture(const std::function<void()>& work) {
  capture_begin();
  try {
    work();
  } catch (...) {
    abandon_capture();
    throw;
  }
  capture_end();
}

void Graph::abandon_capture() noexcept {
  if (!capturing_) return;
  cudaGraph_t graph = nullptr;
  cudaStreamEndCapture(capture_stream(device_).raw(), &graph);  // invalidated or not: discarded
  if (graph != nullptr) cudaGraphDestroy(graph);
  cudaGetLastError();
  capturing_ = false;
  guard_.reset();
  try {
    detail::end_private_pool(device_, pool_);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln cuda::Graph: ending the private pool of an abandoned capture failed: %s\n", e.what());
  }
}

void Graph::replay() {
  KILN_CHECK(captured(), "cuda::Graph::replay on cuda:{}: nothing was captured (call capture first)", device_);
  DeviceGuard g(device_);
  const Stream stream = current_stream(device_);
  KILN_CUDA_CHECK(cudaGraphLaunch(exec_, stream.raw()));
  replayed_.record(stream);
}

Graph::~Graph() {
  abandon_capture();
  // Errors cannot be thrown from here: a failed wait (a sticky device error) is reported and the
  // pool still released, since the context and its memory are gone with such an error.
  try {
    DeviceGuard g(device_);
    replayed_.synchronize();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln cuda::Graph on cuda:%d: waiting for the last replay failed: %s\n", device_, e.what());
  }
  if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
  if (graph_ != nullptr) cudaGraphDestroy(graph_);
  if (!pool_open_) return;
  try {
    detail::release_private_pool(device_, pool_);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln cuda::Graph on cuda:%d: releasing its memory pool failed: %s\n", device_, e.what());
  }
}

namespace {

/// core's DeviceGraph over a cuda::Graph (make_device_graph(Device(kCUDA, i))).
class CudaDeviceGraph final : public DeviceGraph {
 public:
  explicit CudaDeviceGraph(int device) : graph_(device) {}
  void capture(const std::function<void()>& work) override { graph_.capture(work); }
  void replay() override { graph_.replay(); }

 private:
  Graph graph_;
};

const bool registered = [] {
  register_device_graph(DeviceType::CUDA, [](Device d) -> std::unique_ptr<DeviceGraph> {
    return std::make_unique<CudaDeviceGraph>(d.index);
  });
  return true;
}();

}  // namespace

}  // namespace kiln::cuda
