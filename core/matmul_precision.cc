#include "core/matmul_precision.h"

#include <atomic>

#include "core/error.h"

namespace kiln {
namespace {
std::atomic<Float32MatmulPrecision> g_precision{Float32MatmulPrecision::highest};
}  // namespace

void set_float32_matmul_precision(Float32MatmulPrecision p) { g_precision.store(p, std::memory_order_relaxed); }

void set_float32_matmul_precision(std::string_view p) {
  if (p == "highest") return set_float32_matmul_precision(Float32MatmulPrecision::highest);
  if (p == "high") return set_float32_matmul_precision(Float32MatmulPrecision::high);
  fail("set_float32_matmul_precision: expected \"highest\" or \"high\", got \"{}\"", p);
}

Float32MatmulPrecision float32_matmul_precision() { return g_precision.load(std::memory_order_relaxed); }

}  // namespace kiln
