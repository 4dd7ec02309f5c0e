#include "bench/sharding_memory_math.h"

#include <algorithm>
#include <functional>

#include "core/error.h"

namespace kiln::bench {

namespace {
constexpr Sharding kAll[] = {Sharding::kDdp, Sharding::kZero1, Sharding::kZero2, Sharding::kZero3,
                             Sharding::kTensorParallel};
}

const char* sharding_name(Sharding s) {
  switch (s) {
    case Sharding::kDdp: return "ddp";
    case Sharding::kZero1: return "zero1";
    case Sharding::kZero2: return "zero2";
    case Sharding::kZero3: return "zero3";
    case Sharding::kTensorParallel: return "tp";
  }
  return "?";
}

const char* sharding_label(Sharding s) {
  switch (s) {
    case Sharding::kDdp: return "DDP";
    case Sharding::kZero1: return "ZeRO-1";
    case Sharding::kZero2: return "ZeRO-2";
    case Sharding::kZero3: return "ZeRO-3";
    case Sharding::kTensorParallel: return "TP";
  }
  return "?";
}

Sharding parse_sharding(const std::string& name) {
  for (Sharding s : kAll)
    if (name == sharding_name(s)) return s;
  fail("sharding_memory: strategy '{}' is none of ddp, zero1, zero2, zero3, tp", name);
}

MemoryBytes formula_bytes(Sharding s, const ParamCount& p, int n) {
  KILN_CHECK(n >= 1, "formula_bytes: {} ranks", n);
  KILN_CHECK(p.split >= 0 && p.split <= p.total, "formula_bytes: {} split parameters of {}", p.split, p.total);
  const double P = p.total;
  switch (s) {
    case Sharding::kDdp: return {4 * P, 4 * P, 8 * P};
    case Sharding::kZero1: return {4 * P, 4 * P, 8 * P / n};
    case Sharding::kZero2:
    case Sharding::kZero3: return {4 * P / n, 4 * P / n, 8 * P / n};
    case Sharding::kTensorParallel: {
      const double local = p.split / n + (P - p.split);
      return {4 * local, 4 * local, 8 * local};
    }
  }
  return {};
}

double paper_params(Sharding s, const ParamCount& p) { return s == Sharding::kZero2 ? 4 * p.total : 0; }

double gathered_bytes(Sharding s, const std::vector<double>& unit_params) {
  double all = 0;
  for (double u : unit_params) all += u;
  if (s == Sharding::kZero2) return 4 * all;
  if (s != Sharding::kZero3 || unit_params.empty()) return 0;
  std::vector<double> rest(unit_params.begin() + 1, unit_params.end());
  std::sort(rest.begin(), rest.end(), std::greater<>());
  double held = unit_params[0];
  for (size_t i = 0; i < rest.size() && i < 2; ++i) held += rest[i];
  return 4 * held;
}

double ratio(double measured, double formula) { return formula > 0 ? measured / formula : 0; }

}  // namespace kiln::bench
