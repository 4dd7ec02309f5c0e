// Fully sharded data parallel (ZeRO-3, PyTorch's FSDP; ZeRO-2 as an option). The model is cut
// into units: every element of the Sequentials named in FsdpOptions::units (a GPT's blocks,
// "h"), and the root (every parameter outside them). A unit's parameters live flattened, padded
// to a multiple of the group size; each rank keeps one f32 shard of that flat vector, the leaf
// the optimizer steps. So parameters, gradients and optimizer state are all 1/N per rank.
//
//   forward of a unit   all-gather its shards into the flat buffer the parameters view (the next
//                       unit's all-gather prefetched), run it, then free the buffer (ZeRO-3)
//   backward of a unit  gather it again (a hook on its output; the unit before it prefetched),
//                       and once its last gradient is accumulated reduce-scatter the unit's
//                       gradients (launched while backward goes on, in a fixed order), free them
//                       and the buffer; each shard's .grad ends as the average over the group
//
//   dist::FullyShardedDataParallel fsdp(model, pg, {.units = {"h"}});
//   optim::AdamW opt(fsdp.shards(), optim::AdamOptions(3e-4));
//   loss_fn(fsdp.forward(x), y).backward(); fsdp.clip_grad_norm_(1.0); opt.step(); opt.zero_grad();
//
// The model keeps its parameter names and tensor handles (views of the gathered buffers, empty
// between uses); parameters() of the model are not for an optimizer, shards() are. Run the model
// through this object while it lives; to use the weights elsewhere take full_state_dict() (its
// parameters stay empty views after it is destroyed). Every rank
// must start from the same weights (a shared seed); training then matches one process on the
// union of the ranks' batches. Mixed precision, as FSDP2's MixedPrecisionPolicy: param_dtype
// gathers the units in bf16/f16 from the f32 shards (the model computes in it; run the forward
// under amp's autocast for the f32-class ops), reduce_dtype is what the gradients are
// reduce-scattered in (f32 by default); with f16 share a GradScaler's found-inf flag over every
// rank (dist::share_found_inf): an overflow lands in one rank's shard only. HSDP (hybrid
// sharding, FSDP2's 2-D mesh): `pg` is the shard group and FsdpOptions::replicate the group of
// this rank's replicas (hsdp_groups() builds both); gradients are reduce-scattered within the
// shard group, then all-reduced across the replicas.
// Checkpoints: distributed/fsdp/fsdp_checkpoint.h (sharded, reshardable; consolidated export).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "distributed/backend/process_group.h"
#include "nn/module.h"

namespace kiln::dist {

enum class ShardingStrategy {
  kFullShard,    // ZeRO-3: parameters gathered for each use and freed after it
  kShardGradOp,  // ZeRO-2: gathered at forward and kept until the unit's backward has ended
};

struct FsdpOptions {
  /// Dotted paths of Sequentials whose elements each become a unit ({"h"} for the GPT).
  std::vector<std::string> units;
  ShardingStrategy strategy = ShardingStrategy::kFullShard;
  /// Start the next unit's all-gather while the current unit runs (forward and backward).
  bool prefetch = true;
  /// Mixed precision: the dtype the units are gathered in and the model computes in (kBFloat16
  /// or kFloat16; unset: f32, the shards' own). Floating inputs of forward() are cast to it.
  std::optional<DType> param_dtype;
  /// The dtype gradients are reduce-scattered (and, under HSDP, all-reduced) in: kFloat32 (the
  /// default: a sum over many ranks keeps f32's precision) or param_dtype (half the traffic).
  DType reduce_dtype = kFloat32;
  /// HSDP: the ranks that hold the same shard as this one in the other shard groups (the
  /// constructor's group is then this rank's shard group). Null: plain FSDP.
  std::shared_ptr<ProcessGroup> replicate;
};

/// This rank's two groups of hybrid sharding over `data_groups` (each a list of world ranks, every
/// data-parallel group of the job, the same lists on every rank): each data group cut into shard
/// groups of `shard_size` consecutive ranks; rank i of every shard group of a data group forms a
/// replicate group. A collective over the default group (new_group). Throws naming the numbers
/// when shard_size does not divide a data group's size.
struct HsdpGroups {
  std::shared_ptr<ProcessGroup> shard, replicate;
};
HsdpGroups hsdp_groups(const std::vector<std::vector<int>>& data_groups, int shard_size);
/// The same over the whole world (one data group: every rank).
HsdpGroups hsdp_groups(int shard_size);

/// What the last backward did.
struct FsdpStats {
  int reduce_scatters = 0;             // one per unit
  int launched_during_backward = 0;    // started before the graph walk ended
  int64_t gathers = 0;                 // all-gathers since construction
};

class FullyShardedDataParallel : public nn::Module {
 public:
  /// Shards `model`'s parameters over `pg` (a collective: every rank, same model). Throws naming
  /// a unit path that is not a Sequential, or a parameter shared between two units.
  FullyShardedDataParallel(std::shared_ptr<nn::Module> model, std::shared_ptr<ProcessGroup> pg,
                           FsdpOptions options = {});
  ~FullyShardedDataParallel() override;

  /// The model's forward with the root's parameters gathered (they stay so until backward ends).
  Tensor forward(const Tensor& x) override;
  /// Sets the wrapped model's mode.
  void train(bool on = true) override;

  /// One f32 leaf per unit (root first, then the units in order): what the optimizer steps.
  std::vector<Tensor> shards() const;
  /// Global-norm clipping over every shard's gradient (a collective); returns the total norm.
  double clip_grad_norm_(double max_norm, double norm_type = 2.0);
  /// The whole model's parameters by name, gathered from the shards (a collective), in the
  /// one-process state_dict's names and shapes (buffers included).
  nn::StateDict full_state_dict();
  /// Loads whole parameters by name (a one-process state_dict) into this rank's shards. Not a
  /// collective. Throws naming a missing key or a shape mismatch before changing anything.
  void load_full_state_dict(const nn::StateDict& state);

  /// Tensors laid out as shards() (one per unit, this rank's slice of its flat vector: AdamW's
  /// moments, say) gathered and cut back into the model's parameters, by name and shape. A
  /// collective. full_state_dict() is this over shards(), plus the buffers.
  nn::StateDict gather_by_name(const std::vector<Tensor>& flat_shards);
  /// The inverse, on this rank alone: tensors by parameter name (every name of every unit, in
  /// its shape) flattened as the units are, and this rank's slice of each unit taken (zeros in
  /// the padding). Throws naming a missing key or a shape mismatch.
  std::vector<Tensor> shard_by_name(const nn::StateDict& by_name) const;
  /// For each shard, a tensor of its shape holding value(name) over the elements of parameter
  /// `name` and 0 over the padding: per-element weights for what flattening mixed (a weight
  /// decay that spares biases and LayerNorms, a norm that counts a replicated parameter once).
  std::vector<Tensor> shard_masks(const std::function<double(const std::string& name)>& value) const;

  struct UnitInfo {
    std::string path;  // "" for the root, else "h.3"
    std::vector<std::string> names;  // the parameters' names in the model
    std::vector<Shape> shapes;
    int64_t numel = 0, padded = 0;   // padded % group size == 0
  };
  std::vector<UnitInfo> units() const;
  /// Bytes the gathered buffers hold now (0 between steps under kFullShard).
  int64_t gathered_bytes() const;
  const FsdpStats& stats() const;
  nn::Module& module() { return *model_; }
  /// The shard group (the whole data-parallel group unless HSDP).
  ProcessGroup& process_group() const { return *pg_; }
  /// HSDP's replicate group, or null.
  const std::shared_ptr<ProcessGroup>& replicate_group() const;

  struct State;  // shared with the units' wrappers and the hooks

 private:
  std::shared_ptr<nn::Module> model_;
  std::shared_ptr<ProcessGroup> pg_;
  std::shared_ptr<State> state_;
};

}  // namespace kiln::dist
