// The scheduler environments init_process_group() recognises (distributed/backend/job_env.h): Slurm's
// compressed node lists, and the env:// variables srun's and mpirun's variables imply, with a
// launcher's or the user's settings winning.
#include <doctest/doctest.h>

#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "distributed/backend/job_env.h"

namespace kiln {
namespace {

using Hosts = std::vector<std::string>;

std::optional<dist::SchedulerEnv> env_of(const std::map<std::string, std::string>& vars) {
  return dist::scheduler_env([&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST_CASE("Slurm node lists expand ranges, lists, padding and several groups") {
  CHECK(dist::expand_nodelist("node[01-04,07],gpu5") == Hosts{"node01", "node02", "node03", "node04", "node07", "gpu5"});
  CHECK(dist::expand_nodelist("single") == Hosts{"single"});
  CHECK(dist::expand_nodelist("a[8-11]") == Hosts{"a8", "a9", "a10", "a11"});
  CHECK(dist::expand_nodelist("r[1-2]n[3,5]") == Hosts{"r1n3", "r1n5", "r2n3", "r2n5"});
  CHECK(dist::expand_nodelist("x[009-011].cluster,y") == Hosts{"x009.cluster", "x010.cluster", "x011.cluster", "y"});
}

TEST_CASE("malformed Slurm node lists are errors naming the list") {
  CHECK(error_of([] { dist::expand_nodelist("node[01-04"); }).find("'node[01-04': unbalanced brackets") != std::string::npos);
  CHECK(error_of([] { dist::expand_nodelist("node[4-2]"); }).find("range 4-2 runs backwards") != std::string::npos);
  CHECK(error_of([] { dist::expand_nodelist("a,,b"); }).find("'a,,b': an empty host name") != std::string::npos);
  CHECK(error_of([] { dist::expand_nodelist("n[1,x]"); }).find("index 'x' is not a number") != std::string::npos);
  CHECK(error_of([] { dist::expand_nodelist("n]1["); }).find("'n]1[': unbalanced brackets") != std::string::npos);
}

TEST_CASE("srun's variables give rank, world size, local rank and rank 0's host") {
  auto e = env_of({{"SLURM_PROCID", "9"}, {"SLURM_NTASKS", "16"}, {"SLURM_LOCALID", "1"},
                   {"SLURM_TASKS_PER_NODE", "8(x2)"}, {"SLURM_JOB_NODELIST", "gpu[03-04]"}});
  REQUIRE(e.has_value());
  CHECK(e->scheduler == "slurm");
  CHECK(e->vars == std::map<std::string, std::string>{{"RANK", "9"}, {"WORLD_SIZE", "16"}, {"LOCAL_RANK", "1"},
                                                      {"LOCAL_WORLD_SIZE", "8"}, {"MASTER_ADDR", "gpu03"},
                                                      {"MASTER_PORT", "29500"}});
  // MASTER_ADDR / MASTER_PORT given by the user are kept; uneven tasks per node set no local size.
  e = env_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "3"}, {"SLURM_TASKS_PER_NODE", "2,1"},
              {"SLURM_NODELIST", "n1,n2"}, {"MASTER_ADDR", "head"}, {"MASTER_PORT", "1234"}});
  REQUIRE(e.has_value());
  CHECK(e->vars.count("MASTER_ADDR") == 0);
  CHECK(e->vars.count("MASTER_PORT") == 0);
  CHECK(e->vars.count("LOCAL_WORLD_SIZE") == 0);
  CHECK(error_of([] { env_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}}); }).find("SLURM_NODELIST") !=
        std::string::npos);
}

TEST_CASE("mpirun's variables; MASTER_ADDR is required across nodes; a launcher's RANK wins") {
  auto e = env_of({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                   {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}});
  REQUIRE(e.has_value());
  CHECK(e->scheduler == "mpi");  // mpirun inside a Slurm allocation started these processes
  CHECK(e->vars == std::map<std::string, std::string>{{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"},
                                                      {"LOCAL_WORLD_SIZE", "4"}, {"MASTER_ADDR", "127.0.0.1"},
                                                      {"MASTER_PORT", "29500"}});
  CHECK(error_of([] {
          env_of({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "8"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}});
        }).find("needs MASTER_ADDR") != std::string::npos);
  CHECK_FALSE(env_of({{"RANK", "0"}, {"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}}).has_value());
  CHECK_FALSE(env_of({}).has_value());
}

}  // namespace
}  // namespace kiln
