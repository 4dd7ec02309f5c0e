// The CUDA half of tensor.to(device): host <-> device and device <-> device copies on the current
// streams, with the events that keep pinned and device blocks alive until the copy is done. Copies
// to or from the host are refused during a CUDA graph capture, with an error naming it.
#include "cuda/copy.h"

#include <cuda_runtime_api.h>

#include "core/kernels.h"
#include "cuda/allocator.h"
#include "cuda/device.h"
#include "cuda/error.h"
#include "cuda/graph.h"
#include "cuda/stream.h"

namespace kiln::cuda {

// The slot's contract (same shape and dtype, both contiguous) is met by its callers,
// core/ops/convert.cc and core/ops/index.cc, which allocate `out` themselves.
void copy_across_devices(Tensor& out, const Tensor& src) {
  const size_t nbytes = static_cast<size_t>(src.numel()) * src.element_size();
  if (nbytes == 0) return;
  void* dst = out.data_ptr();
  const void* from = src.data_ptr();
  if (out.is_cuda() && src.device().is_cpu()) {
    DeviceGuard g(out.device());
    Stream s = current_stream(out.device().index);
    // Captured, the copy would re-read this host memory at every replay, long after it is gone.
    KILN_CHECK(!is_capturing(s),
               "copy cpu -> {} of {} bytes during a CUDA graph capture: a graph cannot take host data; copy the "
               "input into a static device tensor (copy_) before replay() instead",
               out.device(), nbytes);
    // From pageable memory cudaMemcpyAsync returns once the source is staged, so the caller may
    // reuse it; from pinned memory it returns at once, and the block is held until the copy ends.
    KILN_CUDA_CHECK(cudaMemcpyAsync(dst, from, nbytes, cudaMemcpyHostToDevice, s.raw()));
    if (detail::is_pinned_ptr(from)) detail::record_pinned_use(from, s);
  } else if (out.device().is_cpu() && src.is_cuda()) {
    DeviceGuard g(src.device());
    Stream s = current_stream(src.device().index);
    KILN_CHECK(!is_capturing(s),
               "copy {} -> cpu of {} bytes (.item(), .to(kCPU), to_vector) during a CUDA graph capture: captured "
               "work does not run, so there is nothing to read yet; read results after replay(), outside the capture",
               src.device(), nbytes);
    KILN_CUDA_CHECK(cudaMemcpyAsync(dst, from, nbytes, cudaMemcpyDeviceToHost, s.raw()));
    s.synchronize();
  } else if (out.is_cuda() && src.is_cuda()) {
    // On the destination's stream, after the work queued on the source's; then the source's stream
    // waits for the copy, so the allocator cannot hand the source block to the next kernel queued
    // there while the copy still reads it. Neither wait blocks the host.
    const Stream src_stream = current_stream(src.device().index), dst_stream = current_stream(out.device().index);
    Event src_ready, copied;
    src_ready.record(src_stream);
    dst_stream.wait(src_ready);
    DeviceGuard g(out.device());
    KILN_CUDA_CHECK(
        cudaMemcpyPeerAsync(dst, out.device().index, from, src.device().index, nbytes, dst_stream.raw()));
    copied.record(dst_stream);
    src_stream.wait(copied);
  } else {
    fail("copy_across_devices: {} -> {} is not a CUDA copy", src.device(), out.device());
  }
}

KILN_REGISTER_KERNEL(copy_across_devices, DeviceType::CUDA, &copy_across_devices);

}  // namespace kiln::cuda
