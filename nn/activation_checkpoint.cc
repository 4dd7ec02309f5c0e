// nn::checkpoint: the forward runs under NoGradGuard and one CheckpointBackward node stands for
// the whole of fn; its backward recomputes fn on detached copies of the inputs with grad on and
// runs a nested backward pass through the recomputed graph (leaves inside fn accumulate their
// .grad there; the input copies' gradients are this node's result).
#include "nn/activation_checkpoint.h"

#include "autograd/engine.h"
#include "autograd/node.h"
#include "core/autocast.h"
#include "core/error.h"
#include "core/grad_mode.h"
#include "core/ops.h"

namespace kiln::nn {
namespace {

/// Sets the random and autocast state of the forward for a scope and restores the current one.
class ReplayGuard {
 public:
  ReplayGuard(const std::vector<Generator*>& gens, const std::vector<GeneratorState>& states,
              const autocast::State& ac)
      : gens_(gens), saved_ac_(autocast::state()) {
    for (size_t i = 0; i < gens_.size(); ++i) {
      saved_.push_back(gens_[i]->state());
      gens_[i]->set_state(states[i]);
    }
    autocast::State replay = ac;
    replay.depth = saved_ac_.depth;
    autocast::set_state(replay);
  }
  ~ReplayGuard() {
    for (size_t i = 0; i < gens_.size(); ++i) gens_[i]->set_state(saved_[i]);
    autocast::set_state(saved_ac_);
  }

 private:
  std::vector<Generator*> gens_;
  std::vector<GeneratorState> saved_;
  autocast::State saved_ac_;
};

}  // namespace

std::vector<Tensor> checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs,
                               const CheckpointOptions& options) {
  if (!GradMode::is_enabled()) return fn(inputs);
  std::vector<Generator*> gens = {&default_generator()};
  for (Generator* g : options.generators) {
    KILN_CHECK(g != nullptr, "checkpoint: options.generators holds a null generator");
    gens.push_back(g);
  }
  std::vector<GeneratorState> rng;
  for (Generator* g : gens) rng.push_back(g->state());
  const autocast::State ac = autocast::state();

  std::vector<Tensor> outputs;
  {
    NoGradGuard no_grad;
    outputs = fn(inputs);
  }
  for (Tensor& o : outputs) {
    KILN_CHECK(o.defined(), "checkpoint: fn returned an undefined tensor");
    o = o.detach();  // an input returned as is must not get this node as its grad_fn
  }

  std::vector<autograd::SavedTensor> saved;
  std::vector<bool> needs;
  for (const Tensor& t : inputs) {
    saved.emplace_back(t);
    needs.push_back(t.defined() && t.requires_grad());
  }
  // The node must exist even when no input requires grad: parameters inside fn do. A dummy leaf
  // input makes record() attach it; it never receives a gradient.
  std::vector<Tensor> edge_inputs = inputs;
  edge_inputs.push_back(zeros({}).requires_grad_());
  autograd::record(
      "CheckpointBackward", edge_inputs, outputs,
      [fn, saved, needs, gens, rng, ac](const std::vector<Tensor>& grads) -> std::vector<Tensor> {
        std::vector<Tensor> leaves;
        for (size_t i = 0; i < saved.size(); ++i) {
          Tensor t = saved[i].unpack("CheckpointBackward");
          if (t.defined()) {
            t = t.detach();
            if (needs[i]) t.requires_grad_();
          }
          leaves.push_back(t);
        }
        std::vector<Tensor> redone;
        {
          ReplayGuard replay(gens, rng, ac);
          EnableGradGuard grad_on;
          redone = fn(leaves);
        }
        KILN_CHECK(redone.size() == grads.size(),
                   "checkpoint: the recomputation returned {} tensors, the forward {}", redone.size(), grads.size());
        std::vector<Tensor> roots, seeds;
        for (size_t i = 0; i < redone.size(); ++i)
          if (grads[i].defined() && redone[i].requires_grad()) {
            roots.push_back(redone[i]);
            seeds.push_back(grads[i]);
          }
        if (!roots.empty()) autograd::backward(roots, seeds);
        std::vector<Tensor> result;
        for (size_t i = 0; i < leaves.size(); ++i) result.push_back(needs[i] ? leaves[i].grad() : Tensor());
        result.push_back(Tensor());  // the dummy
        return result;
      });
  return outputs;
}

}  // namespace kiln::nn
