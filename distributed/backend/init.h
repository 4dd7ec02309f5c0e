// Starting a distributed job, as torch.distributed.init_process_group: rendezvous through a
// store (env://, tcp://host:port or file:///path), then a process group on the chosen backend.
// The group is also kept as the default one.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "distributed/backend/process_group.h"

namespace kiln::dist {

struct InitOptions {
  /// "gloo" (CPU tensors; CUDA tensors staged through the host) or "nccl" (CUDA tensors).
  std::string backend = "gloo";
  /// "env://" reads MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE (what //distributed/launch
  /// sets; under srun or mpirun they are derived from the scheduler's variables, job_env.h); "tcp://host:port" and "file:///path" take rank and world_size from here or the env.
  std::string init_method = "env://";
  int rank = -1;
  int world_size = -1;
  /// Rendezvous and per-collective timeout.
  Millis timeout{std::chrono::seconds(300)};
};

/// Joins the job; blocks until every rank has joined (or the timeout says who did not).
std::shared_ptr<ProcessGroup> init_process_group(const InitOptions& options = {});
bool is_initialized();
/// The group made by the last init_process_group (throws if none).
std::shared_ptr<ProcessGroup> default_group();
int get_rank();        // 0 when not initialised
int get_world_size();  // 1 when not initialised
/// Drops the default group (its threads stop once nobody else holds it).
void destroy_process_group();

/// A process group over a subset of the default group's ranks (as torch.distributed.new_group):
/// every rank of the default group must call it, with the same `ranks`, in the same order
/// (members connect through their own prefix of the rendezvous store). Returns the subgroup,
/// where this process has rank = its index in `ranks`, or null when it is not a member. Same
/// backend and timeout as the default group.
std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks);

/// What new_group applies to each group it makes (`id`: the how-manieth new_group call, the
/// same on every rank; `ranks` as given): trace_process_group on the default group installs
/// the flight recorder's wrapper here. destroy_process_group clears it.
using GroupWrapper =
    std::function<std::shared_ptr<ProcessGroup>(std::shared_ptr<ProcessGroup> group, int id, const std::vector<int>& ranks)>;
void set_new_group_wrapper(GroupWrapper wrapper);

/// True when the environment describes a multi-process job (WORLD_SIZE set and > 1, after what
/// srun's or mpirun's variables imply: distributed/backend/job_env.h).
bool launched_with_world();

/// How a backend other than Gloo plugs in (//distributed/backend:nccl registers "nccl" when linked):
/// it gets the rendezvous store, the rank, the size and the timeout.
using BackendFactory =
    std::function<std::shared_ptr<ProcessGroup>(std::shared_ptr<Store> store, int rank, int size, Millis timeout)>;
void register_backend(const std::string& name, BackendFactory factory);

}  // namespace kiln::dist
