// Per-thread cuDNN handles (see cudnn_handle.h). They live as long as the thread; creating one
// costs milliseconds, so they are never made per call.
#include "cuda/cudnn_handle.h"

#include <map>

#include "cuda/error.h"
#include "cuda/stream.h"

namespace kiln::cuda {

cudnnHandle_t cudnn_handle_for(const Tensor& t) {
  thread_local std::map<int, cudnnHandle_t> handles;
  const int device = t.device().index;
  auto it = handles.find(device);
  cudnnHandle_t h;
  if (it == handles.end()) {
    KILN_CUDNN_CHECK(cudnnCreate(&h));
    handles[device] = h;
  } else {
    h = it->second;
  }
  KILN_CUDNN_CHECK(cudnnSetStream(h, current_stream(device).raw()));
  return h;
}

}  // namespace kiln::cuda
