// CUDA graphs: a piece of device work (a whole training step) captured once on a side stream and
// replayed with one launch, so the per-kernel launch cost is paid once per replay instead of once
// per kernel. Allocations during the capture come from a private pool of the caching allocator
// (cuda/caching_allocator.h) that lives as long as the graph, since every replay writes there.
// A replay reads and writes the very tensors the capture used: refill inputs in place (copy_)
// before replay(), read outputs after it. Includes no CUDA header.
#pragma once

#include <functional>
#include <optional>

#include "cuda/caching_allocator.h"
#include "cuda/stream.h"

struct CUgraph_st;
struct CUgraphExec_st;

namespace kiln::cuda {

/// Whether work queued on `stream` is being captured now (not run).
bool is_capturing(const Stream& stream);

/// For a scope, lets the calling thread make calls a capture in thread-local mode forbids
/// (cudaMalloc): as PyTorch's allocator does, for calls that do not touch the capturing stream.
class RelaxedCaptureGuard {
 public:
  RelaxedCaptureGuard();
  ~RelaxedCaptureGuard();
  RelaxedCaptureGuard(const RelaxedCaptureGuard&) = delete;
  RelaxedCaptureGuard& operator=(const RelaxedCaptureGuard&) = delete;

 private:
  int previous_;  // cudaStreamCaptureMode
};

/// One captured graph on one device. Warm up the work eagerly first (cuBLAS plans, optimizer
/// state, lazily made buffers), then capture it once and replay it as often as needed.
/// Operations that need the host during the capture (a copy to or from the host, `.item()`, a
/// synchronisation) throw kiln::Error naming the capture, and the capture is abandoned.
class Graph {
 public:
  /// A graph for cuda:`device` (-1: the current device).
  explicit Graph(int device = -1);
  /// Waits for the last replay, then frees the graph and its private memory pool.
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  /// Starts capturing: until capture_end the calling thread's current stream on the device is the
  /// capture stream, and allocations on it come from this graph's pool.
  void capture_begin();
  /// Ends the capture and instantiates the graph; throws (naming the capture) when an illegal
  /// operation invalidated it.
  void capture_end();
  /// capture_begin(); work(); capture_end() — and an abandoned capture when `work` throws.
  void capture(const std::function<void()>& work);
  /// Queues the captured work on the device's current stream.
  void replay();

  bool captured() const { return exec_ != nullptr; }
  int device() const { return device_; }
  /// This graph's private pool in the device's caching allocator.
  PoolId pool() const { return pool_; }
  /// The stream captures of `device` run on (made once per device, shared by its graphs).
  static Stream capture_stream(int device);

 private:
  void abandon_capture() noexcept;  // ends a capture that failed, discarding what it recorded

  int device_;
  PoolId pool_;
  bool capturing_ = false;
  bool pool_open_ = false;  // the private pool exists in the allocator (to be released)
  std::optional<StreamGuard> guard_;
  CUgraph_st* graph_ = nullptr;
  CUgraphExec_st* exec_ = nullptr;
  Event replayed_;  // after the last replay: the pool is released only once it has passed
};

}  // namespace kiln::cuda
