// CUDA kernel times for the profiler: a pair of timing events around each kernel on the
// thread's current stream; read (synchronising on the end event) when the profiler stops.
// Linked only in CUDA builds (profiler/BUILD: cuda_timer); registers itself at start-up.
#include <memory>
#include <mutex>
#include <vector>

#include "core/device.h"
#include "core/op.h"
#include "cuda/stream.h"
#include "profiler/profiler.h"

namespace kiln::profiler {
namespace {

class CudaTimer final : public DeviceTimer {
 public:
  int64_t begin(int device_index) override {
    auto m = std::make_unique<Measurement>();
    m->stream_device = device_index;
    m->start.record(cuda::current_stream(device_index));
    std::lock_guard<std::mutex> lock(mu_);
    all_.push_back(std::move(m));
    return static_cast<int64_t>(all_.size()) - 1;
  }
  void end(int64_t id) override {
    Measurement* m = get(id);
    if (m != nullptr) m->end.record(cuda::current_stream(m->stream_device));
  }
  double elapsed_ms(int64_t id) override {
    Measurement* m = get(id);
    if (m == nullptr || !m->end.recorded()) return -1;
    m->end.synchronize();
    return m->start.elapsed_ms(m->end);
  }
  void reset() override {
    std::lock_guard<std::mutex> lock(mu_);
    all_.clear();
  }

 private:
  struct Measurement {
    cuda::Event start{/*enable_timing=*/true}, end{/*enable_timing=*/true};
    int stream_device = 0;
  };
  Measurement* get(int64_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    return id >= 0 && id < static_cast<int64_t>(all_.size()) ? all_[static_cast<size_t>(id)].get() : nullptr;
  }
  std::mutex mu_;
  std::vector<std::unique_ptr<Measurement>> all_;
};

detail::Registrar register_cuda_timer([] {
  static CudaTimer timer;
  register_device_timer(static_cast<int>(DeviceType::CUDA), &timer);
});

}  // namespace
}  // namespace kiln::profiler
