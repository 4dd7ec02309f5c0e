// Slurm and Open MPI environments -> env:// variables; see job_env.h.
#include "distributed/backend/job_env.h"

#include <cstdlib>

#include "core/error.h"

namespace kiln::dist {
namespace {

int parse_nonneg(const std::string& s, const char* what, const std::string& list) {
  KILN_CHECK(!s.empty() && s.find_first_not_of("0123456789") == std::string::npos,
             "Slurm node list '{}': {} '{}' is not a number", list, what, s);
  return std::stoi(s);
}

// "01-04,07" inside brackets -> {"01","02","03","04","07"}, widths kept.
std::vector<std::string> expand_ranges(const std::string& body, const std::string& list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= body.size()) {
    size_t comma = body.find(',', start);
    std::string item = body.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    KILN_CHECK(!item.empty(), "Slurm node list '{}': an empty range in [{}]", list, body);
    size_t dash = item.find('-');
    if (dash == std::string::npos) {
      parse_nonneg(item, "index", list);
      out.push_back(item);
    } else {
      std::string lo_s = item.substr(0, dash), hi_s = item.substr(dash + 1);
      int lo = parse_nonneg(lo_s, "range start", list), hi = parse_nonneg(hi_s, "range end", list);
      KILN_CHECK(lo <= hi, "Slurm node list '{}': range {} runs backwards", list, item);
      for (int i = lo; i <= hi; ++i) {
        std::string n = std::to_string(i);
        if (n.size() < lo_s.size()) n = std::string(lo_s.size() - n.size(), '0') + n;
        out.push_back(n);
      }
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

// One host expression (no top-level commas): "a[1-2]b[3,5]" -> a1b3 a1b5 a2b3 a2b5.
std::vector<std::string> expand_host(const std::string& expr, const std::string& list) {
  std::vector<std::string> names = {""};
  size_t i = 0;
  while (i < expr.size()) {
    size_t open = expr.find('[', i);
    std::string literal = expr.substr(i, open == std::string::npos ? std::string::npos : open - i);
    KILN_CHECK(literal.find(']') == std::string::npos, "Slurm node list '{}': ']' without '['", list);
    for (auto& n : names) n += literal;
    if (open == std::string::npos) break;
    size_t close = expr.find(']', open);
    KILN_CHECK(close != std::string::npos, "Slurm node list '{}': '[' without ']'", list);
    std::vector<std::string> next;
    for (const auto& n : names)
      for (const auto& part : expand_ranges(expr.substr(open + 1, close - open - 1), list)) next.push_back(n + part);
    names = std::move(next);
    i = close + 1;
  }
  return names;
}

}  // namespace

std::vector<std::string> expand_nodelist(const std::string& list) {
  int balance = 0;
  for (char c : list) {
    balance += c == '[' ? 1 : c == ']' ? -1 : 0;
    KILN_CHECK(balance == 0 || balance == 1, "Slurm node list '{}': unbalanced brackets", list);
  }
  KILN_CHECK(balance == 0, "Slurm node list '{}': unbalanced brackets", list);
  std::vector<std::string> hosts;
  size_t start = 0;
  int depth = 0;
  for (size_t i = 0; i <= list.size(); ++i) {
    if (i < list.size() && list[i] == '[') ++depth;
    if (i < list.size() && list[i] == ']') --depth;
    if (i == list.size() || (list[i] == ',' && depth == 0)) {
      std::string expr = list.substr(start, i - start);
      KILN_CHECK(!expr.empty(), "Slurm node list '{}': an empty host name", list);
      for (auto& h : expand_host(expr, list)) hosts.push_back(std::move(h));
      start = i + 1;
    }
  }
  return hosts;
}

std::optional<SchedulerEnv> scheduler_env(const std::function<const char*(const char*)>& getenv) {
  auto get = [&](const char* name) -> std::optional<std::string> {
    const char* v = getenv(name);
    if (v == nullptr || *v == '\0') return std::nullopt;
    return std::string(v);
  };
  if (get("RANK")) return std::nullopt;  // a launcher (or the user) said it already
  SchedulerEnv e;
  if (auto rank = get("OMPI_COMM_WORLD_RANK")) {
    auto size = get("OMPI_COMM_WORLD_SIZE");
    KILN_CHECK(size.has_value(), "init_process_group: OMPI_COMM_WORLD_RANK is set but OMPI_COMM_WORLD_SIZE is not");
    e.scheduler = "mpi";
    e.vars["RANK"] = *rank;
    e.vars["WORLD_SIZE"] = *size;
    if (auto v = get("OMPI_COMM_WORLD_LOCAL_RANK")) e.vars["LOCAL_RANK"] = *v;
    if (auto v = get("OMPI_COMM_WORLD_LOCAL_SIZE")) e.vars["LOCAL_WORLD_SIZE"] = *v;
    if (!get("MASTER_ADDR")) {
      auto local = get("OMPI_COMM_WORLD_LOCAL_SIZE");
      KILN_CHECK(local && *local == *size,
                 "init_process_group: an mpirun job over several nodes (OMPI_COMM_WORLD_SIZE={}, LOCAL_SIZE={}) needs "
                 "MASTER_ADDR, the host of rank 0: pass it with `mpirun -x MASTER_ADDR=<host> ...`", *size,
                 local.value_or("unset"));
      e.vars["MASTER_ADDR"] = "127.0.0.1";
    }
  } else if (auto rank = get("SLURM_PROCID")) {
    auto ntasks = get("SLURM_NTASKS");
    KILN_CHECK(ntasks.has_value(), "init_process_group: SLURM_PROCID is set but SLURM_NTASKS is not (run under srun)");
    e.scheduler = "slurm";
    e.vars["RANK"] = *rank;
    e.vars["WORLD_SIZE"] = *ntasks;
    if (auto v = get("SLURM_LOCALID")) e.vars["LOCAL_RANK"] = *v;
    // "8" or "8(x2)": one number of tasks on every node; a mixed "8(x1),4" is left to LOCAL_RANK alone.
    auto per_node = get("SLURM_NTASKS_PER_NODE");
    if (!per_node) per_node = get("SLURM_TASKS_PER_NODE");
    if (per_node) {
      std::string n = per_node->substr(0, per_node->find('('));
      if (per_node->find(',') == std::string::npos && !n.empty() && n.find_first_not_of("0123456789") == std::string::npos)
        e.vars["LOCAL_WORLD_SIZE"] = n;
    }
    if (!get("MASTER_ADDR")) {
      auto list = get("SLURM_STEP_NODELIST");
      if (!list) list = get("SLURM_JOB_NODELIST");
      if (!list) list = get("SLURM_NODELIST");
      KILN_CHECK(list.has_value(), "init_process_group: under Slurm with no MASTER_ADDR, SLURM_NODELIST (or "
                 "SLURM_STEP_NODELIST / SLURM_JOB_NODELIST) names rank 0's host, but none is set");
      e.vars["MASTER_ADDR"] = expand_nodelist(*list).front();
    }
  } else {
    return std::nullopt;
  }
  if (!get("MASTER_PORT")) e.vars["MASTER_PORT"] = std::to_string(kDefaultMasterPort);
  return e;
}

std::string apply_scheduler_env() {
  auto e = scheduler_env([](const char* name) { return std::getenv(name); });
  if (!e) return "";
  for (const auto& [name, value] : e->vars) setenv(name.c_str(), value.c_str(), /*overwrite=*/0);
  return e->scheduler;
}

}  // namespace kiln::dist
