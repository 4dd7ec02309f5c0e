// Registers the caching allocator for DeviceType::CUDA: one CachingAllocatorCore per device on
// cudaMalloc/cudaFree and CUDA events, allocations served on the thread's current stream (from a
// graph's private pool while that stream captures: cuda/graph.h). Also
// the pinned host allocator: cudaHostAlloc'd blocks cached by size, reused only once the async
// copies that read them have finished.
#include "cuda/allocator.h"

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "core/allocator.h"
#include "core/ops.h"
#include "cuda/device.h"
#include "cuda/error.h"
#include "cuda/graph.h"

namespace kiln::cuda {
namespace {

class CudaBackend final : public MemoryBackend {
 public:
  explicit CudaBackend(int device) : device_(device) {}

  void* raw_alloc(size_t nbytes) override {
    DeviceGuard g(device_);
    void* p = nullptr;
    RelaxedCaptureGuard relaxed;  // a capture's pool grows with cudaMalloc, illegal in thread-local mode
    cudaError_t e = cudaMalloc(&p, nbytes);
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // not sticky: clear it so the caller can retry
      return nullptr;
    }
    KILN_CUDA_CHECK(e);
    return p;
  }
  void raw_free(void* ptr) override {
    DeviceGuard g(device_);
    KILN_CUDA_CHECK(cudaFree(ptr));
  }
  void* record_event(StreamId stream) override {
    DeviceGuard g(device_);
    cudaEvent_t ev = nullptr;
    KILN_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    const cudaError_t e = cudaEventRecord(ev, reinterpret_cast<cudaStream_t>(stream));
    if (e != cudaSuccess) cudaEventDestroy(ev);
    KILN_CUDA_CHECK(e);
    return ev;
  }
  bool event_done(void* event) override {
    cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(event));
    if (e == cudaErrorNotReady) {
      cudaGetLastError();
      return false;
    }
    KILN_CUDA_CHECK(e);
    return true;
  }
  void destroy_event(void* event) override { cudaEventDestroy(static_cast<cudaEvent_t>(event)); }
  bool memory_info(size_t* free, size_t* total) override {
    DeviceGuard g(device_);
    return cudaMemGetInfo(free, total) == cudaSuccess || (cudaGetLastError(), false);
  }

 private:
  int device_;
};

struct DevicePool {
  std::unique_ptr<CudaBackend> backend;
  std::unique_ptr<CachingAllocatorCore> core;
};

/// Never destroyed: tensors may outlive static destructors.
std::vector<DevicePool>& pools() {
  static auto* p = [] {
    auto* v = new std::vector<DevicePool>(device_count());
    for (int d = 0; d < static_cast<int>(v->size()); ++d) {
      (*v)[d].backend = std::make_unique<CudaBackend>(d);
      (*v)[d].core = std::make_unique<CachingAllocatorCore>(*(*v)[d].backend, fmt::format("cuda:{}", d));
    }
    return v;
  }();
  return *p;
}

CachingAllocatorCore& pool_for(int device) {
  auto& p = pools();
  KILN_CHECK(device >= 0 && device < static_cast<int>(p.size()),
             "cuda: device cuda:{} does not exist ({} CUDA devices present)", device, p.size());
  return *p[device].core;
}

void log_dealloc_failure(Device device, const void* ptr, const std::exception& e) noexcept {
  std::fprintf(stderr, "kiln %s allocator: freeing %p failed (%s); the memory is not reused\n",
               device.str().c_str(), ptr, e.what());
}

class CudaAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes, Device device) override {
    return pool_for(device.index).allocate(nbytes, current_stream(device.index).id());
  }
  // Runs in tensors' destructors, where an exception would terminate the program: a failure
  // (a bad pointer; device errors are already absorbed by the pool) is logged instead.
  void deallocate(void* ptr, size_t, Device device) noexcept override {
    try {
      pool_for(device.index).free(ptr);
    } catch (const std::exception& e) {
      log_dealloc_failure(device, ptr, e);
    }
  }
};

// ---- pinned host memory

class PinnedAllocator {
 public:
  void* allocate(size_t nbytes) {
    std::lock_guard<std::mutex> g(mu_);
    process_events();
    auto it = free_.lower_bound(nbytes);
    // Reuse a cached block unless it is more than twice the size asked.
    if (it != free_.end() && it->first <= 2 * nbytes) {
      void* p = it->second;
      free_.erase(it);
      return p;
    }
    void* p = nullptr;
    cudaError_t e = cudaHostAlloc(&p, nbytes, cudaHostAllocDefault);
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      release();
      e = cudaHostAlloc(&p, nbytes, cudaHostAllocDefault);
    }
    KILN_CUDA_CHECK(e);
    sizes_[p] = nbytes;
    return p;
  }
  void free(void* p) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = uses_.find(p);
    if (it != uses_.end() && !it->second.empty()) {
      waiting_.push_back({p, std::move(it->second)});
      uses_.erase(it);
      return;
    }
    if (it != uses_.end()) uses_.erase(it);
    free_.emplace(sizes_.at(p), p);
  }
  bool contains(const void* p) {
    std::lock_guard<std::mutex> g(mu_);
    // Any address inside a pinned block counts (views start at an offset).
    auto it = sizes_.upper_bound(const_cast<void*>(p));
    if (it == sizes_.begin()) return false;
    --it;
    return static_cast<const char*>(p) < static_cast<char*>(it->first) + it->second;
  }
  void record_use(const void* p, const Stream& s) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = sizes_.upper_bound(const_cast<void*>(p));
    if (it == sizes_.begin()) return;
    --it;
    auto ev = std::make_shared<Event>();
    ev->record(s);
    uses_[it->first].push_back(std::move(ev));
  }

 private:
  void process_events() {
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      bool done = true;
      for (auto& e : it->second) done = done && e->query();
      if (done) {
        free_.emplace(sizes_.at(it->first), it->first);
        it = waiting_.erase(it);
      } else {
        ++it;
      }
    }
  }
  void release() {
    for (auto& [size, p] : free_) {
      cudaFreeHost(p);
      sizes_.erase(p);
    }
    free_.clear();
  }

  std::mutex mu_;
  std::map<void*, size_t> sizes_;  // every live pinned block
  std::multimap<size_t, void*> free_;
  std::map<void*, std::vector<std::shared_ptr<Event>>> uses_;
  std::vector<std::pair<void*, std::vector<std::shared_ptr<Event>>>> waiting_;
};

PinnedAllocator& pinned() {
  static auto* p = new PinnedAllocator();
  return *p;
}

/// core's view of the pinned allocator (kiln::pin_memory, the DataLoader's pin_memory option).
class PinnedHostAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes, Device) override { return pinned().allocate(nbytes == 0 ? 1 : nbytes); }
  void deallocate(void* ptr, size_t, Device device) noexcept override {
    try {
      pinned().free(ptr);
    } catch (const std::exception& e) {
      log_dealloc_failure(device, ptr, e);
    }
  }
};

const bool registered = [] {
  static CudaAllocator allocator;
  register_allocator(DeviceType::CUDA, &allocator);
  static PinnedHostAllocator pinned_host;
  register_pinned_allocator(&pinned_host);
  return true;
}();

}  // namespace

MemoryStats memory_stats(int device) { return pool_for(device).stats(); }
void reset_peak_memory_stats(int device) { pool_for(device).reset_peak_stats(); }
void empty_cache() {
  for (auto& p : pools()) p.core->empty_cache();
}
std::string memory_summary(int device) { return pool_for(device).summary(); }

void record_stream(const Tensor& t, const Stream& stream) {
  KILN_CHECK(t.is_cuda(), "record_stream: tensor is on {}, not a CUDA device", t.device());
  pool_for(t.device().index).record_stream(t.storage()->data(), stream.id());
}

Tensor pin_memory(const Tensor& t) { return kiln::pin_memory(t); }

bool is_pinned(const Tensor& t) { return t.defined() && t.device().is_cpu() && detail::is_pinned_ptr(t.data_ptr()); }

namespace detail {
void begin_private_pool(int device, PoolId id, const Stream& stream) {
  pool_for(device).begin_private_pool(id, stream.id());
}
void end_private_pool(int device, PoolId id) { pool_for(device).end_private_pool(id); }
void release_private_pool(int device, PoolId id) { pool_for(device).release_private_pool(id); }
bool is_pinned_ptr(const void* ptr) { return device_count() > 0 && ptr != nullptr && pinned().contains(ptr); }
void record_pinned_use(const void* ptr, const Stream& stream) { pinned().record_use(ptr, stream); }
}  // namespace detail

}  // namespace kiln::cuda
