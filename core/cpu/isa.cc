#include "core/cpu/isa.h"

#include <cstdlib>
#include <cstring>

namespace kiln::cpu {

bool use_avx512() {
#if defined(KILN_HAVE_AVX512) && defined(__x86_64__)
  static const bool yes = [] {
    const char* isa = std::getenv("KILN_CPU_ISA");
    if (isa != nullptr && std::strcmp(isa, "avx512") != 0) return false;
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  }();
  return yes;
#else
  return false;
#endif
}

}  // namespace kiln::cpu
