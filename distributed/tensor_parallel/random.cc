#include "distributed/tensor_parallel/random.h"

#include <fmt/format.h>

#include "core/error.h"
#include "nn/functional.h"

namespace kiln::dist::tp {

uint64_t sharded_region_seed(const ProcessGroup& group) {
  const GeneratorState s = default_generator().reserve(1);
  const std::array<uint32_t, 4> w = philox4x32(s.seed, s.offset);
  constexpr uint64_t kOffset = 2718;  // Megatron's model-parallel seed offset
  return ((static_cast<uint64_t>(w[0]) << 32) | w[1]) + kOffset + static_cast<uint64_t>(group.rank());
}

Tensor parallel_dropout(const Tensor& x, double p, bool training, const ProcessGroup& group, bool sharded) {
  if (!training || p == 0) return x;
  if (!sharded) return nn::functional::dropout(x, p, true);
  Generator gen(sharded_region_seed(group));
  return nn::functional::dropout(x, p, true, &gen);
}

ParallelDropout::ParallelDropout(double p, GroupPtr group, bool sharded)
    : nn::Module("ParallelDropout"), p_(p), group_(std::move(group)), sharded_(sharded) {
  KILN_CHECK(p >= 0 && p < 1, "ParallelDropout: probability must be in [0, 1), got {}", p);
  KILN_CHECK(group_ != nullptr, "ParallelDropout: the tensor-parallel group is null");
}

Tensor ParallelDropout::forward(const Tensor& x) { return parallel_dropout(x, p_, is_training(), *group_, sharded_); }

std::string ParallelDropout::extra_repr() const {
  return fmt::format("p={}, {}", p_, sharded_ ? "sharded region (a mask per tensor rank)" : "replicated region");
}

}  // namespace kiln::dist::tp
