// bmm on CUDA through cuBLAS (cublasGemmStridedBatchedEx): f32 and f64 in their own precision
// (f32 without TF32, as the CPU reference, unless set_float32_matmul_precision("high")),
// f16/bf16 with f32 accumulation. Row-major C = A @ B is run as column-major C^T = B^T @ A^T; an
// operand cuBLAS cannot read in place (neither row- nor column-major, or expanded with stride 0:
// cuda/gemm_layout.h) is copied first, and a strided output is written through a contiguous
// buffer. One cuBLAS handle per thread and device, bound to the current stream at each call, with
// a workspace of ours per stream, so cuBLAS never allocates one itself inside a CUDA graph capture.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <map>

#include "core/kernels.h"
#include "core/matmul_precision.h"
#include "cuda/device.h"
#include "cuda/error.h"
#include "cuda/gemm_layout.h"
#include "cuda/graph.h"
#include "cuda/stream.h"

namespace kiln::cuda {
namespace {

cublasHandle_t handle_for(int device) {
  // Handles live for the thread (a few KiB each); cuBLAS frees them at exit.
  thread_local std::map<int, cublasHandle_t> handles;
  auto it = handles.find(device);
  if (it != handles.end()) return it->second;
  cublasHandle_t h = nullptr;
  KILN_CUBLAS_CHECK(cublasCreate(&h));
  handles[device] = h;
  return h;
}

constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;  // what PyTorch gives cuBLAS on Hopper

/// The workspace for GEMMs on `stream`: one per thread, device and stream (two streams must not
/// share one), kept for the thread's life as the handles are. Plain cudaMalloc, outside the
/// caching allocator: made inside a capture, a block of the graph's pool would outlive the graph.
void* workspace_for(int device, RawStream stream) {
  thread_local std::map<std::pair<int, RawStream>, void*> workspaces;
  auto it = workspaces.find({device, stream});
  if (it != workspaces.end()) return it->second;
  void* p = nullptr;
  {
    RelaxedCaptureGuard relaxed;  // cudaMalloc during a capture (the capture stream's first GEMM)
    KILN_CUDA_CHECK(cudaMalloc(&p, kCublasWorkspaceBytes));
  }
  workspaces[{device, stream}] = p;
  return p;
}

/// One operand as cuBLAS sees it: the transposed matrix (op N) or the matrix itself (op T) in
/// column-major memory with leading dimension `ld`.
struct Operand {
  Tensor t;  // the tensor whose memory is used (the input, or a contiguous copy)
  cublasOperation_t op;
  int64_t ld;
};

/// `x` [B, R, C] as the column-major transpose (R x C row-major -> C x R column-major), in place
/// when its strides are a legal cuBLAS layout; an expanded (stride 0) or overlapping matrix is
/// copied, since a leading dimension raised to the legal minimum would read values it lacks.
Operand as_transposed(const Tensor& x) {
  if (auto l = blas_layout(x.size(1), x.size(2), x.stride(1), x.stride(2)))
    return {x, l->transposed ? CUBLAS_OP_T : CUBLAS_OP_N, l->ld};
  Tensor c = make_tensor(x.sizes(), x.dtype(), x.device());
  kernels::copy[x.device()](c, x);
  return {c, CUBLAS_OP_N, std::max<int64_t>(x.size(2), 1)};
}

int checked_int(int64_t v, const char* what) {
  KILN_CHECK(v <= INT_MAX, "bmm (cuda): {} = {} exceeds cuBLAS's int range", what, v);
  return static_cast<int>(v);
}

void bmm_kernel(Tensor& out, const Tensor& a, const Tensor& b) {
  // The slot's contract (3-D, one dtype, matching shapes) is checked by core/ops/linalg.cc.
  const int64_t B = a.size(0), M = a.size(1), K = a.size(2), N = b.size(2);
  if (out.numel() == 0) return;
  DeviceGuard g(out.device());
  if (K == 0) {
    kernels::fill[out.device()](out, 0);
    return;
  }
  cudaDataType_t type;
  cublasComputeType_t compute;
  switch (a.dtype()) {
    case kFloat32: type = CUDA_R_32F; compute = allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F; break;
    case kFloat64: type = CUDA_R_64F; compute = CUBLAS_COMPUTE_64F; break;
    case kFloat16: type = CUDA_R_16F; compute = CUBLAS_COMPUTE_32F; break;
    case kBFloat16: type = CUDA_R_16BF; compute = CUBLAS_COMPUTE_32F; break;
    default: fail("bmm (cuda): dtype {} is not supported (floating types only)", a.dtype());
  }
  const Operand A = as_transposed(a), Bm = as_transposed(b);
  // The output is written as op N only (C^T column-major), each matrix apart from the others.
  const std::optional<BlasLayout> out_layout = blas_layout(M, N, out.stride(1), out.stride(2));
  const bool direct = out_layout && !out_layout->transposed && (out.stride(0) >= M * N || B == 1);
  Tensor c = direct ? out : make_tensor(out.sizes(), out.dtype(), out.device());
  const int64_t ldc = direct ? out_layout->ld : std::max<int64_t>(N, 1);
  const double one_d = 1, zero_d = 0;
  const float one_f = 1, zero_f = 0;
  const void* alpha = compute == CUBLAS_COMPUTE_64F ? static_cast<const void*>(&one_d) : &one_f;
  const void* beta = compute == CUBLAS_COMPUTE_64F ? static_cast<const void*>(&zero_d) : &zero_f;
  cublasHandle_t h = handle_for(out.device().index);
  const RawStream stream = current_stream(out.device().index).raw();
  KILN_CUBLAS_CHECK(cublasSetStream(h, stream));
  // After cublasSetStream, which resets the workspace to cuBLAS's own.
  KILN_CUBLAS_CHECK(cublasSetWorkspace(h, workspace_for(out.device().index, stream), kCublasWorkspaceBytes));
  // Column-major: C^T (N x M) = op(B) (N x K) * op(A) (K x M).
  KILN_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      h, Bm.op, A.op, checked_int(N, "N"), checked_int(M, "M"), checked_int(K, "K"), alpha, Bm.t.data_ptr(), type,
      checked_int(Bm.ld, "ldb"), B == 1 ? 0 : Bm.t.stride(0), A.t.data_ptr(), type, checked_int(A.ld, "lda"),
      B == 1 ? 0 : A.t.stride(0), beta, c.data_ptr(), type, checked_int(ldc, "ldc"), B == 1 ? 0 : c.stride(0),
      checked_int(B, "batch"), compute, CUBLAS_GEMM_DEFAULT));
  if (!direct) kernels::copy[out.device()](out, c);
}

}  // namespace

KILN_REGISTER_KERNEL(bmm, DeviceType::CUDA, &bmm_kernel);

}  // namespace kiln::cuda
