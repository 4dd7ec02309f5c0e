#include "distributed/fsdp/fsdp.h"

#include <map>
#include <set>

#include "autograd/engine.h"
#include "core/error.h"
#include "core/grad_mode.h"
#include "core/ops.h"
#include "distributed/data_parallel/clip_grad_norm.h"
#include "nn/sequential.h"

namespace kiln::dist {
/// One unit: its parameters as views of `flat`, and this rank's f32 shard of it.
struct Unit {
  FullyShardedDataParallel::UnitInfo info;
  std::vector<Tensor> params;
  std::vector<int64_t> offsets;
  Tensor flat;                 // [padded] in the gather dtype: the parameters' storage, resized to 0 while freed
  Tensor shard;                // [padded / N], f32 leaf
  bool gathered = true;
  WorkPtr gather_work;
  uint32_t version = 0;        // the flat storage's version, restored after each re-gather
  int pending = 0;             // gradients still to come in this backward
  bool ready = false;
  Tensor grad_flat, grad_out;  // the reduce-scatter's input and output
  WorkPtr rs_work, ar_work;    // ar_work: HSDP's all-reduce of grad_out across the replicas
};

struct FullyShardedDataParallel::State {
  std::shared_ptr<ProcessGroup> pg, replicate;  // replicate: HSDP's, else null
  FsdpOptions options;
  DType gather_dtype = kFloat32;
  Device device;
  std::vector<Unit> units;  // [0]: the root
  FsdpStats stats;
  bool armed = false, callback_queued = false, in_finish = false;
  size_t next_launch = 0;
  std::vector<size_t> launch_order;  // the units in reverse, then the root
  /// Launched units whose reduce-scatter is not folded into the shard's gradient yet, oldest
  /// first. At most kMaxInFlight stay: each holds its unit's whole gradient (grad_flat), so
  /// unbounded, a step's peak held the whole model's gradient, as ZeRO-2 without sharding would.
  std::vector<size_t> in_flight;
  /// HSDP: units whose reduce-scatter is done and whose all-reduce across the replicas is in
  /// flight, oldest first (each holds 1/N of its unit: grad_out), at most kMaxInFlight too.
  std::vector<size_t> replicating;
  static constexpr size_t kMaxInFlight = 2;

  int world() const { return pg->size(); }
  /// Ranks a gradient is averaged over: the shard group's, times the replicas under HSDP.
  int ranks() const { return pg->size() * (replicate ? replicate->size() : 1); }

  void start_gather(size_t u) {
    Unit& un = units[u];
    if (un.gathered || un.gather_work) return;
    StorageImpl& st = *un.flat.storage();
    un.version = st.version();
    st.resize_(static_cast<size_t>(un.info.padded) * un.flat.element_size());
    Tensor local = un.shard.detach();
    if (gather_dtype != local.dtype()) local = local.to(gather_dtype);  // mixed precision: gather in bf16/f16
    un.gather_work = pg->allgather_into_tensor(un.flat, local);
    ++stats.gathers;
  }

  void wait_gather(size_t u) {
    Unit& un = units[u];
    if (un.gathered) return;
    start_gather(u);
    un.gather_work->wait();
    un.gather_work.reset();
    un.flat.storage()->set_version_unsafe(un.version);  // the same values autograd saved
    un.gathered = true;
  }

  void free(size_t u) {
    Unit& un = units[u];
    if (un.gather_work) wait_gather(u);
    if (!un.gathered) return;
    un.flat.storage()->resize_(0);
    un.gathered = false;
  }

  void prepare() {
    armed = GradMode::is_enabled();
    stats.reduce_scatters = stats.launched_during_backward = 0;  // FsdpStats: the last backward's
    callback_queued = in_finish = false;
    next_launch = 0;
    in_flight.clear();
    replicating.clear();
    for (Unit& un : units) {
      un.pending = 0;
      for (const Tensor& p : un.params) un.pending += p.requires_grad() ? 1 : 0;
      un.ready = false;
    }
  }

  void before_forward(size_t u) {
    wait_gather(u);
    if (options.prefetch && u + 1 < units.size()) start_gather(u + 1);
  }

  void after_forward(size_t u, const Tensor& y, const std::shared_ptr<State>& self) {
    if (armed && y.requires_grad()) {
      std::weak_ptr<State> weak = self;
      y.register_hook([weak, u](const Tensor& g) {
        if (auto s = weak.lock()) s->before_backward(u);
        return g;
      });
    }
    if (options.strategy == ShardingStrategy::kFullShard) free(u);
  }

  void before_backward(size_t u) {
    wait_gather(u);
    if (options.prefetch && u > 1) start_gather(u - 1);
  }

  void on_grad(size_t u, const std::shared_ptr<State>& self) {
    if (!armed || in_finish) return;
    if (!callback_queued) {
      callback_queued = true;
      std::weak_ptr<State> weak = self;
      autograd::queue_callback([weak] {
        if (auto s = weak.lock()) s->finish();
      });
    }
    if (--units[u].pending == 0) {
      units[u].ready = true;
      launch_ready();
    }
  }

  void launch_ready() {
    while (next_launch < launch_order.size() && units[launch_order[next_launch]].ready) launch(launch_order[next_launch++]);
  }

  void launch(size_t u) {
    Unit& un = units[u];
    const TensorOptions reduce = TensorOptions().dtype(options.reduce_dtype).device(device);
    un.grad_flat = zeros({un.info.padded}, reduce);
    for (size_t i = 0; i < un.params.size(); ++i) {
      Tensor g = un.params[i].grad();
      if (!g.defined()) continue;
      un.grad_flat.narrow(0, un.offsets[i], g.numel()).copy_(g.reshape({-1}));  // widened to reduce_dtype
      un.params[i].set_grad(Tensor());
    }
    un.grad_out = empty({un.info.padded / world()}, reduce);
    un.rs_work = pg->reduce_scatter_tensor(un.grad_out, un.grad_flat, ReduceOp::kSum);
    if (!in_finish) ++stats.launched_during_backward;
    if (u != 0) free(u);
    in_flight.push_back(u);
    while (in_flight.size() > kMaxInFlight) {
      reduced(in_flight.front());
      in_flight.erase(in_flight.begin());
    }
  }

  /// Waits for unit u's reduce-scatter and frees the unit's whole gradient; then folds the result
  /// into the shard or, under HSDP, starts its all-reduce across the replicas (in the same order
  /// on every rank), folded once kMaxInFlight newer ones are in flight or backward ends.
  void reduced(size_t u) {
    Unit& un = units[u];
    un.rs_work->wait();
    un.rs_work.reset();
    un.grad_flat = Tensor();
    if (!replicate) return fold(u);
    un.ar_work = replicate->allreduce(un.grad_out, ReduceOp::kSum);
    replicating.push_back(u);
    while (replicating.size() > kMaxInFlight) {
      fold(replicating.front());
      replicating.erase(replicating.begin());
    }
  }

  /// Adds unit u's mean gradient (reduced, and all-reduced under HSDP) into its shard's f32 .grad.
  void fold(size_t u) {
    Unit& un = units[u];
    NoGradGuard no_grad;
    if (un.ar_work) {
      un.ar_work->wait();
      un.ar_work.reset();
    }
    Tensor g = un.grad_out.to(kFloat32) / Scalar(static_cast<double>(ranks()));
    if (un.shard.grad().defined()) un.shard.grad().add_(g);
    else un.shard.set_grad(g);
    un.grad_out = Tensor();
  }

  void finish() {
    in_finish = true;
    for (Unit& un : units) un.ready = true;  // a unit without gradients reduces zeros
    launch_ready();
    for (size_t u : in_flight) reduced(u);
    in_flight.clear();
    for (size_t u : replicating) fold(u);
    replicating.clear();
    stats.reduce_scatters = static_cast<int>(units.size());
    for (size_t u = 0; u < units.size(); ++u) free(u);
    armed = false;
  }
};

namespace {

/// A Sequential element run as a unit: the element's parameters, buffers and children under
/// their own names (the model's names do not change), and the gather/free around its forward.
class UnitModule : public nn::Module {
 public:
  UnitModule(std::shared_ptr<nn::Module> inner, std::shared_ptr<FullyShardedDataParallel::State> state, size_t unit)
      : nn::Module("FsdpUnit"), inner_(std::move(inner)), state_(std::move(state)), unit_(unit) {
    for (auto& [name, t] : inner_->named_parameters(false)) register_parameter(name, t, t.requires_grad());
    for (auto& [name, t] : inner_->named_buffers(false)) register_buffer(name, t);
    for (auto& [name, child] : inner_->named_children()) register_module(name, child);
  }
  Tensor forward(const Tensor& x) override {
    state_->before_forward(unit_);
    Tensor y = inner_->forward(x);
    state_->after_forward(unit_, y, state_);
    return y;
  }
  void train(bool on) override {
    nn::Module::train(on);
    inner_->train(on);
  }

 private:
  std::shared_ptr<nn::Module> inner_;
  std::shared_ptr<FullyShardedDataParallel::State> state_;
  size_t unit_;
};

}  // namespace

FullyShardedDataParallel::FullyShardedDataParallel(std::shared_ptr<nn::Module> model, std::shared_ptr<ProcessGroup> pg,
                                                   FsdpOptions options)
    : nn::Module("FullyShardedDataParallel"), model_(std::move(model)), pg_(std::move(pg)),
      state_(std::make_shared<State>()) {
  KILN_CHECK(model_ != nullptr && pg_ != nullptr, "FullyShardedDataParallel: the model or the process group is null");
  State& s = *state_;
  s.pg = pg_;
  s.replicate = options.replicate;
  s.options = options;
  s.gather_dtype = options.param_dtype.value_or(kFloat32);
  KILN_CHECK(s.gather_dtype == kFloat32 || s.gather_dtype == kBFloat16 || s.gather_dtype == kFloat16,
             "FullyShardedDataParallel: param_dtype {} is not a floating dtype to compute in (bf16, f16 or f32)",
             s.gather_dtype);
  KILN_CHECK(options.reduce_dtype == kFloat32 || options.reduce_dtype == s.gather_dtype,
             "FullyShardedDataParallel: reduce_dtype {} must be f32 or the param_dtype {}", options.reduce_dtype,
             s.gather_dtype);
  const int world = pg_->size();
  KILN_CHECK(!model_->parameters().empty(), "FullyShardedDataParallel: the model has no parameters");
  s.device = model_->parameters().front().device();

  // Which unit each parameter belongs to: the units' elements, then the root for the rest.
  std::map<std::string, std::shared_ptr<nn::Module>> modules;
  for (auto& [path, m] : model_->named_modules()) modules[path] = m;
  struct Planned {
    std::string path;
    std::shared_ptr<nn::Sequential> parent;
    size_t index;
  };
  std::vector<Planned> planned;
  for (const std::string& path : options.units) {
    auto it = modules.find(path);
    KILN_CHECK(it != modules.end(), "FullyShardedDataParallel: the model has no module '{}' to split into units", path);
    auto seq = std::dynamic_pointer_cast<nn::Sequential>(it->second);
    KILN_CHECK(seq != nullptr, "FullyShardedDataParallel: '{}' is a {}, not a Sequential", path, it->second->type_name());
    for (size_t i = 0; i < seq->size(); ++i) planned.push_back({path + "." + std::to_string(i), seq, i});
  }
  std::map<const TensorImpl*, size_t> owner;
  std::vector<std::pair<std::string, Tensor>> all = model_->named_parameters();
  s.units.resize(planned.size() + 1);
  for (size_t u = 0; u < planned.size(); ++u) {
    s.units[u + 1].info.path = planned[u].path;
    for (auto& [name, p] : (*planned[u].parent)[planned[u].index]->named_parameters()) owner[p.unsafe_impl()] = u + 1;
  }
  std::set<const TensorImpl*> seen;
  for (auto& [name, p] : all) {
    if (!seen.insert(p.unsafe_impl()).second) continue;  // a tied parameter: its first name holds it
    auto it = owner.find(p.unsafe_impl());
    Unit& un = s.units[it == owner.end() ? 0 : it->second];
    KILN_CHECK(p.dtype() == kFloat32 && p.is_contiguous(),
               "FullyShardedDataParallel: parameter '{}' is {} {}; shard f32 contiguous parameters (compute in "
               "bf16/f16 under autocast)", name, p.dtype(), p.is_contiguous() ? "contiguous" : "non-contiguous");
    KILN_CHECK(p.device() == s.device, "FullyShardedDataParallel: parameter '{}' is on {}, the others on {}", name,
               p.device(), s.device);
    un.info.names.push_back(name);
    un.info.shapes.push_back(p.sizes());
    un.offsets.push_back(un.info.numel);
    un.info.numel += p.numel();
    un.params.push_back(p);
  }
  // A parameter of a unit that is also used by another unit's module would be freed under it.
  for (size_t u = 1; u < s.units.size(); ++u)
    for (const std::string& name : s.units[u].info.names)
      KILN_CHECK(name.starts_with(s.units[u].info.path + "."),
                 "FullyShardedDataParallel: parameter '{}' is shared between unit '{}' and another module", name,
                 s.units[u].info.path);

  // Flatten, take rank 0's values (as DDP does), keep this rank's shard, and make the
  // parameters views of the flat buffer.
  NoGradGuard no_grad;
  for (Unit& un : s.units) {
    un.info.padded = std::max<int64_t>(world, (un.info.numel + world - 1) / world * world);
    un.flat = zeros({un.info.padded}, TensorOptions().device(s.device));
    for (size_t i = 0; i < un.params.size(); ++i)
      un.flat.narrow(0, un.offsets[i], un.params[i].numel()).copy_(un.params[i].reshape({-1}));
    pg_->broadcast(un.flat, 0)->wait();
    if (s.replicate) s.replicate->broadcast(un.flat, 0)->wait();  // then every replica holds rank 0's
    const int64_t chunk = un.info.padded / world;
    un.shard = un.flat.narrow(0, pg_->rank() * chunk, chunk).clone().requires_grad_();
    if (s.gather_dtype != kFloat32) un.flat = un.flat.to(s.gather_dtype);
    for (size_t i = 0; i < un.params.size(); ++i) {
      TensorImpl* impl = un.params[i].unsafe_impl();
      impl->storage = un.flat.storage();
      impl->offset = un.offsets[i];
      impl->strides = contiguous_strides(impl->sizes);
      impl->dtype = s.gather_dtype;  // the model computes in the dtype it is gathered in
    }
  }
  for (size_t u = 0; u < s.units.size(); ++u) {
    s.launch_order.push_back(s.units.size() - 1 - u);
    std::weak_ptr<State> weak = state_;
    for (const Tensor& p : s.units[u].params)
      if (p.requires_grad())
        p.register_post_accumulate_grad_hook([weak, u](const Tensor&) {
          if (auto st = weak.lock()) st->on_grad(u, st);
        });
  }
  for (size_t u = 0; u < planned.size(); ++u)
    planned[u].parent->replace(planned[u].index,
                               std::make_shared<UnitModule>((*planned[u].parent)[planned[u].index], state_, u + 1));
  for (size_t u = 0; u < s.units.size(); ++u) s.free(u);
}

FullyShardedDataParallel::~FullyShardedDataParallel() = default;

Tensor FullyShardedDataParallel::forward(const Tensor& x) {
  State& s = *state_;
  s.prepare();
  s.before_forward(0);
  // As FSDP2's cast_forward_inputs: a floating input meets weights of the gather dtype.
  const bool cast = x.is_floating_point() && x.dtype() != s.gather_dtype;
  Tensor y = model_->forward(cast ? x.to(s.gather_dtype) : x);
  if (!s.armed || !y.requires_grad())
    for (size_t u = 0; u < s.units.size(); ++u) s.free(u);  // no backward will come
  return y;
}

std::vector<Tensor> FullyShardedDataParallel::shards() const {
  std::vector<Tensor> out;
  for (const Unit& un : state_->units) out.push_back(un.shard);
  return out;
}

double FullyShardedDataParallel::clip_grad_norm_(double max_norm, double norm_type) {
  return dist::clip_grad_norm_(shards(), max_norm, *pg_, norm_type);
}

nn::StateDict FullyShardedDataParallel::gather_by_name(const std::vector<Tensor>& flat_shards) {
  KILN_CHECK(flat_shards.size() == state_->units.size(), "FullyShardedDataParallel::gather_by_name: {} tensors for {} units",
             flat_shards.size(), state_->units.size());
  NoGradGuard no_grad;
  nn::StateDict out;
  for (size_t u = 0; u < state_->units.size(); ++u) {
    const Unit& un = state_->units[u];
    const Tensor& part = flat_shards[u];
    KILN_CHECK(part.dim() == 1 && part.numel() == un.shard.numel(),
               "FullyShardedDataParallel::gather_by_name: unit {} ('{}') takes {} elements per rank, got {}", u,
               un.info.path, un.shard.numel(), part.shape_str());
    Tensor whole = empty({un.info.padded}, TensorOptions().dtype(part.dtype()).device(part.device()));
    pg_->allgather_into_tensor(whole, part.detach().contiguous())->wait();
    for (size_t i = 0; i < un.params.size(); ++i)
      out[un.info.names[i]] = whole.narrow(0, un.offsets[i], un.params[i].numel()).reshape(un.info.shapes[i]).clone();
  }
  return out;
}

std::vector<Tensor> FullyShardedDataParallel::shard_by_name(const nn::StateDict& by_name) const {
  for (const Unit& un : state_->units)
    for (size_t i = 0; i < un.params.size(); ++i) {
      auto it = by_name.find(un.info.names[i]);
      KILN_CHECK(it != by_name.end(), "FullyShardedDataParallel: missing '{}'", un.info.names[i]);
      KILN_CHECK(it->second.sizes() == un.info.shapes[i], "FullyShardedDataParallel: '{}' is {}, the model's {}",
                 un.info.names[i], it->second.sizes(), un.info.shapes[i]);
    }
  NoGradGuard no_grad;
  const int world = pg_->size(), rank = pg_->rank();
  std::vector<Tensor> out;
  for (const Unit& un : state_->units) {
    const DType dtype = un.params.empty() ? kFloat32 : by_name.at(un.info.names[0]).dtype();
    Tensor whole = zeros({un.info.padded}, TensorOptions().dtype(dtype).device(state_->device));
    for (size_t i = 0; i < un.params.size(); ++i)
      whole.narrow(0, un.offsets[i], un.params[i].numel()).copy_(by_name.at(un.info.names[i]).reshape({-1}));
    const int64_t chunk = un.info.padded / world;
    out.push_back(whole.narrow(0, rank * chunk, chunk).clone());
  }
  return out;
}

std::vector<Tensor> FullyShardedDataParallel::shard_masks(const std::function<double(const std::string&)>& value) const {
  nn::StateDict by_name;
  for (const Unit& un : state_->units)
    for (size_t i = 0; i < un.params.size(); ++i)
      by_name[un.info.names[i]] = full(un.info.shapes[i], value(un.info.names[i]));
  return shard_by_name(by_name);
}

nn::StateDict FullyShardedDataParallel::full_state_dict() {
  nn::StateDict out = gather_by_name(shards());
  for (auto& [name, b] : model_->named_buffers()) out[name] = b.clone();
  return out;
}

void FullyShardedDataParallel::load_full_state_dict(const nn::StateDict& state) {
  for (const Unit& un : state_->units)
    for (size_t i = 0; i < un.params.size(); ++i) {
      auto it = state.find(un.info.names[i]);
      KILN_CHECK(it != state.end(), "FullyShardedDataParallel::load_full_state_dict: missing '{}'", un.info.names[i]);
      KILN_CHECK(it->second.sizes() == un.info.shapes[i],
                 "FullyShardedDataParallel::load_full_state_dict: '{}' is {} in the file, {} in the model",
                 un.info.names[i], it->second.sizes(), un.info.shapes[i]);
    }
  const std::vector<Tensor> values = shard_by_name(state);
  NoGradGuard no_grad;
  for (size_t u = 0; u < state_->units.size(); ++u) state_->units[u].shard.detach().copy_(values[u]);
  for (auto& [name, b] : model_->named_buffers()) {
    auto it = state.find(name);
    if (it != state.end()) b.detach().copy_(it->second);
  }
}

std::vector<FullyShardedDataParallel::UnitInfo> FullyShardedDataParallel::units() const {
  std::vector<UnitInfo> infos;
  for (const Unit& un : state_->units) infos.push_back(un.info);
  return infos;
}

void FullyShardedDataParallel::train(bool on) {
  nn::Module::train(on);
  model_->train(on);
}

int64_t FullyShardedDataParallel::gathered_bytes() const {
  int64_t n = 0;
  for (const Unit& un : state_->units) n += static_cast<int64_t>(un.flat.storage()->nbytes());
  return n;
}

const FsdpStats& FullyShardedDataParallel::stats() const { return state_->stats; }

const std::shared_ptr<ProcessGroup>& FullyShardedDataParallel::replicate_group() const { return state_->replicate; }

}  // namespace kiln::dist
