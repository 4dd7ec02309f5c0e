// oneDNN's f32 GEMM behind gemm.h's library slot, loaded at run time (see gemm.h): Kiln builds
// and runs without it, and no header or link flag of it enters the build.
#include <dlfcn.h>

#include <cstdlib>
#include <string>

#include "core/cpu/gemm.h"
#include "core/error.h"

namespace kiln::cpu {
namespace {

// oneDNN's C API (dnnl.h, oneDNN 2.x): row-major C = alpha * op(A) @ op(B) + beta * C.
using DnnlSgemm = int (*)(char transa, char transb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);
struct DnnlVersion {
  int major, minor, patch;
  const char* hash;
  unsigned cpu_runtime, gpu_runtime;
};

struct Library {
  DnnlSgemm sgemm = nullptr;
  void (*omp_set_num_threads)(int) = nullptr;
  std::string name;  // "oneDNN 2.6.3"; empty when not loaded
};

const Library& library() {
  static const Library lib = [] {
    Library l;
    const char* env = std::getenv("KILN_GEMM");
    const std::string want = env != nullptr ? env : "";
    KILN_CHECK(want.empty() || want == "eigen" || want == "onednn",
               "KILN_GEMM={}: expected eigen (Eigen only) or onednn (require oneDNN), or unset (oneDNN where "
               "installed)", want);
    if (want == "eigen") return l;
    void* h = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL);
    KILN_CHECK(h != nullptr || want != "onednn", "KILN_GEMM=onednn: {} (Debian's libdnnl2 installs it)", dlerror());
    if (h == nullptr) return l;
    l.sgemm = reinterpret_cast<DnnlSgemm>(dlsym(h, "dnnl_sgemm"));
    // Debian's oneDNN runs on OpenMP; each calling thread asks it for one thread (below).
    l.omp_set_num_threads = reinterpret_cast<void (*)(int)>(dlsym(h, "omp_set_num_threads"));
    auto version = reinterpret_cast<const DnnlVersion* (*)()>(dlsym(h, "dnnl_version"));
    KILN_CHECK((l.sgemm != nullptr && version != nullptr) || want != "onednn",
               "KILN_GEMM=onednn: libdnnl.so.2 lacks dnnl_sgemm or dnnl_version (oneDNN 2.x expected)");
    if (l.sgemm == nullptr || version == nullptr) return Library{};
    const DnnlVersion* v = version();
    l.name = fmt::format("oneDNN {}.{}.{}", v->major, v->minor, v->patch);
    return l;
  }();
  return lib;
}

}  // namespace

const char* sgemm_library() { return library().name.c_str(); }

bool sgemm_library_takes(int64_t M, int64_t N, int64_t K) {
  return library().sgemm != nullptr && M >= kLibraryMinRows && N >= 64 && K >= 64;
}

void sgemm_library_run(int64_t M, int64_t N, int64_t K, GemmOperand a, GemmOperand b, float* c, int64_t ldc,
                       bool accumulate) {
  const Library& lib = library();
  KILN_CHECK(lib.sgemm != nullptr, "sgemm: no GEMM library is loaded (KILN_GEMM={})",
             std::getenv("KILN_GEMM") ? std::getenv("KILN_GEMM") : "unset");
  // Kiln's pool does the threading: oneDNN's OpenMP runs one thread for each of Kiln's (the
  // setting is per calling thread in libgomp; it also applies to OpenMP code the program itself
  // runs on Kiln's threads).
  thread_local bool serial = false;
  if (!serial && lib.omp_set_num_threads != nullptr) {
    lib.omp_set_num_threads(1);
    serial = true;
  }
  // A column-major operand with leading dim ld is the transpose of a row-major one.
  const int rc = lib.sgemm(a.row_major ? 'N' : 'T', b.row_major ? 'N' : 'T', M, N, K, 1.0f,
                           static_cast<const float*>(a.data), a.ld, static_cast<const float*>(b.data), b.ld,
                           accumulate ? 1.0f : 0.0f, c, ldc);
  KILN_CHECK(rc == 0, "sgemm: {} failed with status {} (M={} N={} K={}, lda={} ldb={} ldc={})", lib.name, rc, M, N,
             K, a.ld, b.ld, ldc);
}

}  // namespace kiln::cpu
