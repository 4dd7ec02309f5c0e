// The per-rank memory formulas of the sharding strategies (Rajbhandari et al., "ZeRO", SC 2020),
// in the f32 terms Kiln trains in: with AdamW every parameter costs 4 bytes of weight, 4 of
// gradient and 8 of optimizer state (the two moments), 16 in all, the same total as the paper's
// mixed-precision 2 + 2 + 12 (f16 weight and gradient; f32 master weight, momentum and variance).
// Kept apart from bench/sharding_memory.cc's measuring so that it can be tested on its own.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::bench {

enum class Sharding { kDdp, kZero1, kZero2, kZero3, kTensorParallel };

/// "ddp", "zero1", "zero2", "zero3", "tp"; parse_sharding throws kiln::Error naming a bad one.
const char* sharding_name(Sharding s);
Sharding parse_sharding(const std::string& name);
/// "DDP", "ZeRO-1", ... for the table.
const char* sharding_label(Sharding s);

/// Bytes per rank a strategy holds between steps, by kind.
struct MemoryBytes {
  double params = 0, grads = 0, state = 0;
  double total() const { return params + grads + state; }
};

/// The model's parameter count: `split` of them are divided by tensor parallelism (heads, MLP
/// features, vocabulary), the rest (LayerNorms, position table, row-parallel biases) replicated.
struct ParamCount {
  double total = 0, split = 0;
};

/// The formula over n ranks, at rest (between steps):
///   DDP     4P       + 4P       + 8P
///   ZeRO-1  4P       + 4P       + 8P/n
///   ZeRO-2  4P/n     + 4P/n     + 8P/n   (Kiln's kShardGradOp frees the gathered parameters when
///                                          backward ends; the paper's ZeRO-2 keeps 4P: see
///                                          paper_params)
///   ZeRO-3  4P/n     + 4P/n     + 8P/n
///   TP      16 (split/n + P - split) split as 4 + 4 + 8
/// Throws kiln::Error for n < 1 or split outside [0, P].
MemoryBytes formula_bytes(Sharding s, const ParamCount& p, int n);

/// The parameters the paper's ZeRO-2 keeps on every rank (4P), Kiln's only from the forward to
/// the end of the backward; 0 for the other strategies (their at-rest figure is the formula's).
double paper_params(Sharding s, const ParamCount& p);

/// The most a step adds to the at-rest formula for parameters gathered on the fly: ZeRO-2 all of
/// them (kept from forward to the end of backward), ZeRO-3 the root unit (gathered from forward
/// to the end of backward) and the largest two others (one in use, the next prefetched); 0
/// otherwise. `unit_params`: each FSDP unit's parameter count, the root first (as shards()).
double gathered_bytes(Sharding s, const std::vector<double>& unit_params);

/// measured / formula, 0 when the formula is 0.
double ratio(double measured, double formula);

}  // namespace kiln::bench
