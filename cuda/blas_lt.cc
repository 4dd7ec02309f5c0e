// linear on CUDA through cuBLASLt: out [M, N] = x [M, K] @ w [N, K]^T + bias, with the bias added
// in the GEMM's epilogue (CUBLASLT_EPILOGUE_BIAS) instead of a second pass over the output.
// Row-major out is the column-major D (N x M) = op_T(w: K x N, ld K) * x (K x M, ld K), so the
// bias is D's per-row vector. f32 (TF32 when set_float32_matmul_precision("high")), f16/bf16
// with f32 accumulation; f64 and anything cuBLASLt finds no algorithm for (or pointers below 16
// bytes of alignment) take bmm + add. The heuristic is told each pointer's real alignment (it
// assumes 256 bytes otherwise). Plans (descriptors and the heuristic's algorithm) are cached per
// thread by shape, dtype, options and alignments; workspaces come from the caching allocator.
#include <cublasLt.h>

#include <map>
#include <tuple>

#include "core/kernels.h"
#include "core/matmul_precision.h"
#include "cuda/device.h"
#include "cuda/error.h"
#include "cuda/gemm_layout.h"
#include "cuda/stream.h"

namespace kiln::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;  // what cuBLAS itself uses on Hopper

cublasLtHandle_t lt_handle(int device) {
  thread_local std::map<int, cublasLtHandle_t> handles;
  auto it = handles.find(device);
  if (it != handles.end()) return it->second;
  cublasLtHandle_t h = nullptr;
  KILN_CUBLASLT_CHECK(cublasLtCreate(&h));
  handles[device] = h;
  return h;
}

/// Descriptors and algorithm for one problem; `ok` is false when cuBLASLt offered no algorithm.
struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;
  bool ok = false;
};

/// Byte alignments of the pointers cuBLASLt reads and writes: A (w), B (x), C and D (out).
struct Alignments {
  uint32_t a = 256, b = 256, d = 256;
};

// dev, M, N, K, dtype, tf32, bias, alignments of A, B and D (C is D)
using PlanKey = std::tuple<int, int64_t, int64_t, int64_t, int, bool, bool, uint32_t, uint32_t, uint32_t>;

template <class T> void set_attr(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const T& v) {
  KILN_CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(d, a, &v, sizeof(v)));
}

void set_pref(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t a, uint32_t v) {
  KILN_CUBLASLT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, a, &v, sizeof(v)));
}

Plan make_plan(cublasLtHandle_t h, int64_t M, int64_t N, int64_t K, DType dt, bool tf32, bool bias,
               const Alignments& align) {
  const cudaDataType_t type = dt == kFloat16 ? CUDA_R_16F : dt == kBFloat16 ? CUDA_R_16BF : CUDA_R_32F;
  const cublasComputeType_t compute = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  Plan p;
  KILN_CUBLASLT_CHECK(cublasLtMatmulDescCreate(&p.op, compute, CUDA_R_32F));
  set_attr(p.op, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
  set_attr(p.op, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  set_attr(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT);
  KILN_CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&p.a, type, K, N, K));
  KILN_CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&p.b, type, K, M, K));
  KILN_CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&p.d, type, N, M, N));
  cublasLtMatmulPreference_t pref = nullptr;
  KILN_CUBLASLT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const size_t ws = kWorkspaceBytes;
  KILN_CUBLASLT_CHECK(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align.a);
  set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align.b);
  set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align.d);
  set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align.d);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(h, p.op, p.a, p.b, p.d, p.d, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS) {
    p.algo = result.algo;
    p.workspace = result.workspaceSize;
    p.ok = true;
  }
  return p;
}

const Plan& plan_for(int device, int64_t M, int64_t N, int64_t K, DType dt, bool tf32, bool bias,
                     const Alignments& align) {
  // Kept for the thread's life, like the handles: a model has a handful of shapes (and views
  // at a handful of offsets).
  thread_local std::map<PlanKey, Plan> plans;
  const PlanKey key{device, M, N, K, static_cast<int>(dt), tf32, bias, align.a, align.b, align.d};
  auto it = plans.find(key);
  if (it == plans.end()) it = plans.emplace(key, make_plan(lt_handle(device), M, N, K, dt, tf32, bias, align)).first;
  return it->second;
}

uint32_t alignment(const Tensor& t) {
  return t.defined() ? gemm_pointer_alignment(reinterpret_cast<uintptr_t>(t.data_ptr())) : 256;
}
bool aligned16(const Tensor& t) { return alignment(t) >= 16; }

/// The path for what cuBLASLt does not take: bmm, then the bias as a broadcast add.
void linear_fallback(Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias) {
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  Tensor out3 = make_view(out, {1, M, N}, {M * N, N, 1}, out.offset());
  kernels::bmm[out.device()](out3, make_view(x, {1, M, K}, {M * K, K, 1}, x.offset()),
                             make_view(w, {1, K, N}, {K * N, 1, K}, w.offset()));
  if (bias.defined())
    kernels::binary[out.device()](BinaryKind::add, out3, out3, make_view(bias, {1, M, N}, {0, 0, 1}, bias.offset()));
}

void linear_kernel(Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias) {
  // Shapes and dtypes are the slot's contract, checked by core/ops/linear.cc.
  if (out.numel() == 0) return;
  const DType dt = x.dtype();
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  DeviceGuard g(out.device());
  const int dev = out.device().index;
  const bool supported = (dt == kFloat32 || dt == kFloat16 || dt == kBFloat16) && K > 0 && aligned16(out) &&
                         aligned16(x) && aligned16(w) && aligned16(bias);
  const bool tf32 = dt == kFloat32 && allow_tf32();
  const Alignments align{alignment(w), alignment(x), alignment(out)};
  const Plan* p = supported ? &plan_for(dev, M, N, K, dt, tf32, bias.defined(), align) : nullptr;
  if (p == nullptr || !p->ok) return linear_fallback(out, x, w, bias);
  if (bias.defined()) {
    const void* bp = bias.data_ptr();
    set_attr(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bp);
  }
  Tensor ws;
  if (p->workspace > 0)
    ws = make_tensor({static_cast<int64_t>((p->workspace + 7) / 8)}, kInt64, out.device());
  const float one = 1, zero = 0;
  KILN_CUBLASLT_CHECK(cublasLtMatmul(lt_handle(dev), p->op, &one, w.data_ptr(), p->a, x.data_ptr(), p->b, &zero,
                                     out.data_ptr(), p->d, out.data_ptr(), p->d, &p->algo,
                                     ws.defined() ? ws.data_ptr() : nullptr, p->workspace,
                                     current_stream(dev).raw()));
}

}  // namespace

KILN_REGISTER_KERNEL(linear, DeviceType::CUDA, &linear_kernel);

}  // namespace kiln::cuda
