#include "core/generator.h"

#include <vector>

namespace kiln {
namespace {
std::vector<void (*)(uint64_t)>& seed_hooks() {
  static std::vector<void (*)(uint64_t)> hooks;
  return hooks;
}
}  // namespace

Generator& default_generator() {
  static Generator gen;
  return gen;
}

void manual_seed(uint64_t seed) {
  default_generator().manual_seed(seed);
  for (auto hook : seed_hooks()) hook(seed);
}

void register_seed_hook(void (*hook)(uint64_t)) { seed_hooks().push_back(hook); }

}  // namespace kiln
