// Seeded random numbers: a counter-based Philox4x32-10 generator, so element i of a fill draws
// from counter (offset + i) and the result is the same whatever the thread count or device.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>

namespace kiln {

struct GeneratorState {
  uint64_t seed = 0;
  uint64_t offset = 0;
};

class Generator {
 public:
  explicit Generator(uint64_t seed = 67280421310721ull) : state_{seed, 0} {}
  void manual_seed(uint64_t seed) { std::lock_guard<std::mutex> g(mu_); state_ = {seed, 0}; }
  GeneratorState state() const { std::lock_guard<std::mutex> g(mu_); return state_; }
  void set_state(GeneratorState s) { std::lock_guard<std::mutex> g(mu_); state_ = s; }
  /// Reserves `n` counters and returns the state to draw them from.
  GeneratorState reserve(uint64_t n) {
    std::lock_guard<std::mutex> g(mu_);
    GeneratorState s = state_;
    state_.offset += n;
    return s;
  }

 private:
  mutable std::mutex mu_;
  GeneratorState state_;
};

/// Philox4x32-10: four 32-bit random words for (key = seed, counter).
inline std::array<uint32_t, 4> philox4x32(uint64_t seed, uint64_t counter) {
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int r = 0; r < 10; ++r) {
    uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0;
    uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
    uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    c1 = static_cast<uint32_t>(p1);
    c3 = static_cast<uint32_t>(p0);
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {c0, c1, c2, c3};
}

/// The default generator of CPU ops.
Generator& default_generator();
/// Seeds every device's default generator (CPU, and CUDA when its backend is linked).
void manual_seed(uint64_t seed);
/// Lets a backend join manual_seed (the CUDA backend registers its generators here).
void register_seed_hook(void (*hook)(uint64_t seed));

}  // namespace kiln
