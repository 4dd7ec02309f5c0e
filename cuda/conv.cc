// conv2d and its backward on CUDA through cuDNN (legacy convolution API): NCHW, groups,
// stride/padding/dilation; f32/f64 without TF32 (FMA math, as the CPU reference) unless
// set_float32_matmul_precision("high") allows TF32 for f32, f16/bf16 with tensor cores and f32
// accumulation. Algorithms come from cuDNN's measured ranking (cudnnFind*AlgorithmEx, as
// torch.backends.cudnn.benchmark), found once per geometry and cached: the first runnable one
// whose math type keeps that policy and whose workspace the caching allocator can give
// (cuda/conv_algo.h), run with its own math type set on the descriptor. (The legacy heuristics,
// cudnnGet*Algorithm_v7, picked algorithms that took 0.9 ms per forward and 2.0 ms per backward
// of MNIST's small convolutions on an H200.) One handle per thread and device.
#include <cudnn.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/dense.h"
#include "core/kernels.h"
#include "core/matmul_precision.h"
#include "cuda/conv_algo.h"
#include "cuda/cudnn_handle.h"
#include "cuda/device.h"
#include "cuda/error.h"

namespace kiln::cuda {
namespace {

cudnnDataType_t data_type(DType t) {
  switch (t) {
    case kFloat32: return CUDNN_DATA_FLOAT;
    case kFloat64: return CUDNN_DATA_DOUBLE;
    case kFloat16: return CUDNN_DATA_HALF;
    case kBFloat16: return CUDNN_DATA_BFLOAT16;
    default: fail("conv2d (cuda): dtype {} is not supported (floating types only)", t);
  }
}

struct TensorDesc {
  cudnnTensorDescriptor_t d = nullptr;
  TensorDesc(DType t, int64_t n, int64_t c, int64_t h, int64_t w) {
    KILN_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d));
    KILN_CUDNN_CHECK(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, data_type(t), static_cast<int>(n),
                                                static_cast<int>(c), static_cast<int>(h), static_cast<int>(w)));
  }
  explicit TensorDesc(const Tensor& x) : TensorDesc(x.dtype(), x.size(0), x.size(1), x.size(2), x.size(3)) {}
  ~TensorDesc() { cudnnDestroyTensorDescriptor(d); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
};

struct FilterDesc {
  cudnnFilterDescriptor_t d = nullptr;
  explicit FilterDesc(const Tensor& w) {
    KILN_CUDNN_CHECK(cudnnCreateFilterDescriptor(&d));
    KILN_CUDNN_CHECK(cudnnSetFilter4dDescriptor(d, data_type(w.dtype()), CUDNN_TENSOR_NCHW, static_cast<int>(w.size(0)),
                                                static_cast<int>(w.size(1)), static_cast<int>(w.size(2)),
                                                static_cast<int>(w.size(3))));
  }
  ~FilterDesc() { cudnnDestroyFilterDescriptor(d); }
  FilterDesc(const FilterDesc&) = delete;
  FilterDesc& operator=(const FilterDesc&) = delete;
};

struct ConvDesc {
  cudnnConvolutionDescriptor_t d = nullptr;
  ConvDesc(const Conv2dParams& p, DType t) {
    KILN_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&d));
    KILN_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
        d, static_cast<int>(p.padding[0]), static_cast<int>(p.padding[1]), static_cast<int>(p.stride[0]),
        static_cast<int>(p.stride[1]), static_cast<int>(p.dilation[0]), static_cast<int>(p.dilation[1]),
        CUDNN_CROSS_CORRELATION, t == kFloat64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT));
    KILN_CUDNN_CHECK(cudnnSetConvolutionGroupCount(d, static_cast<int>(p.groups)));
    const bool half = t == kFloat16 || t == kBFloat16;
    // CUDNN_DEFAULT_MATH lets f32 use TF32 tensor cores; FMA math keeps full f32.
    const cudnnMathType_t math = half ? CUDNN_TENSOR_OP_MATH
                                 : (t == kFloat32 && allow_tf32()) ? CUDNN_DEFAULT_MATH
                                                                   : CUDNN_FMA_MATH;
    KILN_CUDNN_CHECK(cudnnSetConvolutionMathType(d, math));
  }
  ~ConvDesc() { cudnnDestroyConvolutionDescriptor(d); }
  ConvDesc(const ConvDesc&) = delete;
  ConvDesc& operator=(const ConvDesc&) = delete;
};

/// Device memory for a cuDNN workspace (empty tensor for 0 bytes).
Tensor workspace(size_t bytes, Device device) {
  if (bytes == 0) return Tensor();
  return make_tensor({static_cast<int64_t>((bytes + 7) / 8)}, kInt64, device);
}
void* ptr(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

ConvMath conv_math(cudnnMathType_t m) {
  switch (m) {
    case CUDNN_TENSOR_OP_MATH: return ConvMath::kTensorOp;
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return ConvMath::kTensorOpAllowConversion;
    case CUDNN_FMA_MATH: return ConvMath::kFma;
    default: return ConvMath::kDefault;
  }
}

cudnnMathType_t cudnn_math(ConvMath m) {
  switch (m) {
    case ConvMath::kTensorOp: return CUDNN_TENSOR_OP_MATH;
    case ConvMath::kTensorOpAllowConversion: return CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
    case ConvMath::kFma: return CUDNN_FMA_MATH;
    case ConvMath::kDefault: break;
  }
  return CUDNN_DEFAULT_MATH;
}

/// The algorithm to run from cuDNN's ranked answer (`n` entries of `perf`), its workspace (in
/// `ws`) and, set on `cd`, its math type; the next one when a workspace cannot be allocated.
template <class Perf>
const Perf& choose(const std::vector<Perf>& perf, int n, ConvDesc& cd, DType t, Device device, Tensor& ws,
                   const char* what, const Tensor& x, const Tensor& w) {
  std::vector<ConvCandidate> candidates;
  for (int i = 0; i < n; ++i)
    candidates.push_back({perf[i].status == CUDNN_STATUS_SUCCESS, conv_math(perf[i].mathType), perf[i].memory});
  std::string alloc_error;
  auto reserve = [&](size_t bytes) {
    try {
      ws = workspace(bytes, device);
      return true;
    } catch (const Error& e) {
      alloc_error = e.what();
      return false;
    }
  };
  const bool exact = t == kFloat64 || (t == kFloat32 && !allow_tf32());
  const std::optional<ConvChoice> c = choose_conv_algo(candidates, exact, reserve);
  if (!c) {
    std::vector<size_t> sizes;
    for (const ConvCandidate& k : candidates)
      if (k.runnable) sizes.push_back(k.workspace);
    fail("conv2d (cuda): no {} algorithm runs for x {} w {} {} ({} candidates, runnable ones need workspaces of {} "
         "bytes{}{})",
         what, x.sizes(), w.sizes(), t, n, sizes, alloc_error.empty() ? "" : "; last allocation failed: ", alloc_error);
  }
  KILN_CUDNN_CHECK(cudnnSetConvolutionMathType(cd.d, cudnn_math(c->math)));
  return perf[c->index];
}

/// One convolution geometry, as the key of the ranking cache.
std::string geometry_key(const char* what, const Tensor& x, const Tensor& w, const Tensor& y, const Conv2dParams& p) {
  return fmt::format("{} cuda:{} {} x{} w{} y{} pad {},{} stride {},{} dil {},{} groups {} tf32 {}", what,
                     x.device().index, x.dtype(), x.sizes(), w.sizes(), y.sizes(), p.padding[0], p.padding[1],
                     p.stride[0], p.stride[1], p.dilation[0], p.dilation[1], p.groups, allow_tf32());
}

/// cuDNN's measured ranking of the algorithms for `key`, fastest first: found on the first call
/// with `find(perf, capacity, &n, workspace, bytes)` (which runs each candidate on the operands,
/// overwriting the output) and cached for the process. The workspace offered is the largest
/// that `heuristic(perf, capacity, &n)` says a candidate wants, up to 1 GiB.
template <class Perf, class Heuristic, class Find>
std::vector<Perf> ranked(const std::string& key, int capacity, Device device, const Heuristic& heuristic,
                         const Find& find) {
  static std::mutex mu;
  static std::map<std::string, std::vector<Perf>> cache;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  std::vector<Perf> perf(static_cast<size_t>(capacity));
  int n = 0;
  KILN_CUDNN_CHECK(heuristic(perf.data(), capacity, &n));
  size_t bytes = 0;
  for (int i = 0; i < n; ++i)
    if (perf[i].status == CUDNN_STATUS_SUCCESS) bytes = std::max(bytes, perf[i].memory);
  bytes = std::min(bytes, size_t{1} << 30);
  Tensor ws;
  try {
    ws = workspace(bytes, device);
  } catch (const Error&) {  // no room for the largest: rank those that need none
    bytes = 0;
  }
  KILN_CUDNN_CHECK(find(perf.data(), capacity, &n, ptr(ws), bytes));
  perf.resize(static_cast<size_t>(n));
  std::lock_guard<std::mutex> lock(mu);
  return cache.emplace(key, std::move(perf)).first->second;
}

// 4-D operands of one floating dtype are the slot's contract, checked by core/ops/conv.cc (the
// backward's x and w are the forward's).
void conv2d_kernel(Tensor& out, const Tensor& x0, const Tensor& w0, const Tensor& bias0, const Conv2dParams& p) {
  if (out.numel() == 0) return;
  DeviceGuard g(out.device());
  const Tensor x = dense(x0), w = dense(w0), bias = dense(bias0);
  const bool direct = out.is_contiguous();
  Tensor y = direct ? out : make_tensor(out.sizes(), out.dtype(), out.device());
  const DType t = x.dtype();
  cudnnHandle_t h = cudnn_handle_for(out);
  TensorDesc xd(x), yd(y);
  FilterDesc wd(w);
  ConvDesc cd(p, t);
  const std::vector<cudnnConvolutionFwdAlgoPerf_t> perf = ranked<cudnnConvolutionFwdAlgoPerf_t>(
      geometry_key("forward", x, w, y, p), CUDNN_CONVOLUTION_FWD_ALGO_COUNT, out.device(),
      [&](cudnnConvolutionFwdAlgoPerf_t* r, int cap, int* n) {
        return cudnnGetConvolutionForwardAlgorithm_v7(h, xd.d, wd.d, cd.d, yd.d, cap, n, r);
      },
      [&](cudnnConvolutionFwdAlgoPerf_t* r, int cap, int* n, void* ws, size_t bytes) {
        return cudnnFindConvolutionForwardAlgorithmEx(h, xd.d, x.data_ptr(), wd.d, w.data_ptr(), cd.d, yd.d,
                                                      y.data_ptr(), cap, n, r, ws, bytes);
      });
  Tensor ws;
  const auto& algo = choose(perf, static_cast<int>(perf.size()), cd, t, out.device(), ws, "forward", x, w);
  KILN_CUDNN_CHECK(cudnnConvolutionForward(h, kCudnnOne.for_type(t), xd.d, x.data_ptr(), wd.d, w.data_ptr(), cd.d,
                                           algo.algo, ptr(ws), algo.memory, kCudnnZero.for_type(t), yd.d,
                                           y.data_ptr()));
  if (bias.defined()) {
    TensorDesc bd(t, 1, bias.numel(), 1, 1);
    KILN_CUDNN_CHECK(
        cudnnAddTensor(h, kCudnnOne.for_type(t), bd.d, bias.data_ptr(), kCudnnOne.for_type(t), yd.d, y.data_ptr()));
  }
  if (!direct) kernels::copy[out.device()](out, y);
}

void conv2d_backward_kernel(Tensor& grad_x, Tensor& grad_w, Tensor& grad_bias, const Tensor& grad_out0,
                            const Tensor& x0, const Tensor& w0, const Conv2dParams& p) {
  if (grad_out0.numel() == 0) {
    for (Tensor* t : {&grad_x, &grad_w, &grad_bias})
      if (t->defined()) kernels::fill[t->device()](*t, 0);
    return;
  }
  DeviceGuard g(grad_out0.device());
  const Tensor x = dense(x0), w = dense(w0), gy = dense(grad_out0);
  const DType t = x.dtype();
  cudnnHandle_t h = cudnn_handle_for(gy);
  TensorDesc xd(x), yd(gy);
  FilterDesc wd(w);
  ConvDesc cd(p, t);
  if (grad_x.defined()) {
    Tensor gx = writable(grad_x);
    const std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf = ranked<cudnnConvolutionBwdDataAlgoPerf_t>(
        geometry_key("backward-data", x, w, gy, p), CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, gy.device(),
        [&](cudnnConvolutionBwdDataAlgoPerf_t* r, int cap, int* n) {
          return cudnnGetConvolutionBackwardDataAlgorithm_v7(h, wd.d, yd.d, cd.d, xd.d, cap, n, r);
        },
        [&](cudnnConvolutionBwdDataAlgoPerf_t* r, int cap, int* n, void* ws, size_t bytes) {
          return cudnnFindConvolutionBackwardDataAlgorithmEx(h, wd.d, w.data_ptr(), yd.d, gy.data_ptr(), cd.d, xd.d,
                                                             gx.data_ptr(), cap, n, r, ws, bytes);
        });
    Tensor ws;
    const auto& algo = choose(perf, static_cast<int>(perf.size()), cd, t, gy.device(), ws, "backward-data", x, w);
    KILN_CUDNN_CHECK(cudnnConvolutionBackwardData(h, kCudnnOne.for_type(t), wd.d, w.data_ptr(), yd.d, gy.data_ptr(),
                                                  cd.d, algo.algo, ptr(ws), algo.memory, kCudnnZero.for_type(t), xd.d,
                                                  gx.data_ptr()));
    write_back(grad_x, gx);
  }
  if (grad_w.defined()) {
    Tensor gw = writable(grad_w);
    const std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf = ranked<cudnnConvolutionBwdFilterAlgoPerf_t>(
        geometry_key("backward-filter", x, w, gy, p), CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, gy.device(),
        [&](cudnnConvolutionBwdFilterAlgoPerf_t* r, int cap, int* n) {
          return cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, xd.d, yd.d, cd.d, wd.d, cap, n, r);
        },
        [&](cudnnConvolutionBwdFilterAlgoPerf_t* r, int cap, int* n, void* ws, size_t bytes) {
          return cudnnFindConvolutionBackwardFilterAlgorithmEx(h, xd.d, x.data_ptr(), yd.d, gy.data_ptr(), cd.d, wd.d,
                                                               gw.data_ptr(), cap, n, r, ws, bytes);
        });
    Tensor ws;
    const auto& algo = choose(perf, static_cast<int>(perf.size()), cd, t, gy.device(), ws, "backward-filter", x, w);
    KILN_CUDNN_CHECK(cudnnConvolutionBackwardFilter(h, kCudnnOne.for_type(t), xd.d, x.data_ptr(), yd.d, gy.data_ptr(),
                                                    cd.d, algo.algo, ptr(ws), algo.memory, kCudnnZero.for_type(t), wd.d,
                                                    gw.data_ptr()));
    write_back(grad_w, gw);
  }
  if (grad_bias.defined()) {
    // The sum of gy over N, H, W through Kiln's own reduction: cuDNN's
    // cudnnConvolutionBackwardBias answers CUDNN_STATUS_NOT_SUPPORTED for bf16 (seen on an H200).
    Tensor gb = writable(grad_bias);
    Tensor gb4 = gb.view({1, gb.numel(), 1, 1});
    kernels::reduce[gy.device().type](ReduceKind::sum, gb4, gy, {0, 2, 3});
    write_back(grad_bias, gb);
  }
}

}  // namespace

KILN_REGISTER_KERNEL(conv2d, DeviceType::CUDA, &conv2d_kernel);
KILN_REGISTER_KERNEL(conv2d_backward, DeviceType::CUDA, &conv2d_backward_kernel);

}  // namespace kiln::cuda
