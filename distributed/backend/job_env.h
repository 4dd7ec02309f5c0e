// Jobs started by a scheduler instead of //distributed/launch: init_process_group() recognises
// the environment of Slurm's `srun` and Open MPI's `mpirun` and derives what env:// reads from it.
//   srun:   SLURM_PROCID -> RANK, SLURM_NTASKS -> WORLD_SIZE, SLURM_LOCALID -> LOCAL_RANK,
//           SLURM_NTASKS_PER_NODE / SLURM_TASKS_PER_NODE -> LOCAL_WORLD_SIZE (when uniform),
//           the first host of SLURM_STEP_NODELIST (else SLURM_JOB_NODELIST, SLURM_NODELIST) -> MASTER_ADDR.
//   mpirun: OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK / _LOCAL_SIZE; MASTER_ADDR must be given
//           (`-x MASTER_ADDR=host`) when the job spans several nodes, else it is 127.0.0.1.
// MASTER_PORT defaults to kDefaultMasterPort. Variables already set (by the launcher or the user)
// always win, and a launcher's RANK wins over both schedulers; Open MPI wins over Slurm (mpirun
// inside an allocation is the one that started the processes).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kiln::dist {

inline constexpr int kDefaultMasterPort = 29500;

/// Expands a Slurm host list: "node[01-04,07],gpu5" -> node01 node02 node03 node04 node07 gpu5
/// (zero padding kept, several bracket groups per name allowed). Throws naming the list on a
/// malformed one (an unclosed bracket, a reversed range, an empty item).
std::vector<std::string> expand_nodelist(const std::string& list);

/// The env:// variables a scheduler's environment implies: which scheduler ("slurm", "mpi") and
/// the variables to set, or nothing when neither started this process (or RANK is already set).
struct SchedulerEnv {
  std::string scheduler;
  std::map<std::string, std::string> vars;
};
std::optional<SchedulerEnv> scheduler_env(const std::function<const char*(const char*)>& getenv);

/// Sets (without overwriting) what scheduler_env finds in this process's environment; returns the
/// scheduler's name, or "" when there is none. init_process_group calls it.
std::string apply_scheduler_env();

}  // namespace kiln::dist
