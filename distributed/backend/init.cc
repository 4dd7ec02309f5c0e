#include "distributed/backend/init.h"

#include <unistd.h>

#include <cstdlib>
#include <map>
#include <mutex>

#include <fmt/ranges.h>

#include "core/error.h"
#include "distributed/backend/gloo_backend.h"
#include "distributed/backend/job_env.h"
#include "distributed/store/rendezvous.h"
#include "distributed/store/socket_util.h"

namespace kiln::dist {
namespace {

std::mutex g_mu;
std::shared_ptr<ProcessGroup> g_default;
// What new_group needs to make subgroups like the default one.
std::shared_ptr<Store> g_store;
std::string g_backend;
Millis g_timeout{};
int g_groups = 0;  // new_group calls so far (the same count on every rank)
GroupWrapper g_wrapper;

std::map<std::string, BackendFactory>& backends() {
  static std::map<std::string, BackendFactory> m;
  return m;
}

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

bool is_loopback(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

/// The address this rank's peers reach it at: loopback for a one-machine job, else this host's
/// address on the route to MASTER_ADDR (its name only when there is no route: a host name often
/// resolves to 127.0.1.1 on Debian, which no other machine can reach). GLOO_SOCKET_IFNAME /
/// KILN_GLOO_HOSTNAME override.
GlooOptions gloo_options(Millis timeout) {
  GlooOptions o;
  o.timeout = timeout;
  o.iface = env_or("GLOO_SOCKET_IFNAME", "");
  std::string master = env_or("MASTER_ADDR", "127.0.0.1");
  char host[256] = {};
  if (!is_loopback(master)) {
    o.hostname = local_address_towards(master);
    if (o.hostname.empty() && gethostname(host, sizeof host - 1) == 0) o.hostname = host;
  }
  o.hostname = env_or("KILN_GLOO_HOSTNAME", o.hostname);
  return o;
}

}  // namespace

void register_backend(const std::string& name, BackendFactory factory) {
  std::lock_guard<std::mutex> lock(g_mu);
  backends()[name] = std::move(factory);
}

std::shared_ptr<ProcessGroup> init_process_group(const InitOptions& options) {
  KILN_CHECK(options.backend == "gloo" || options.backend == "nccl",
             "init_process_group: backend '{}' is unknown (gloo or nccl)", options.backend);
  BackendFactory factory;
  if (options.backend != "gloo") {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = backends().find(options.backend);
    KILN_CHECK(it != backends().end(),
               "init_process_group: backend '{}' is not in this program: link //distributed/backend:nccl (it needs a "
               "build with the CUDA toolkit), or use 'gloo'",
               options.backend);
    factory = it->second;
  }
  if (options.init_method == "env://" && options.rank < 0) apply_scheduler_env();  // srun, mpirun
  Rendezvous rv = rendezvous(options.init_method, options.rank, options.world_size, options.timeout);
  std::shared_ptr<ProcessGroup> pg =
      factory ? factory(rv.store, rv.rank, rv.world_size, options.timeout)
              : std::make_shared<ProcessGroupGloo>(rv.store, rv.rank, rv.world_size, gloo_options(options.timeout));
  // The default group is released before the CUDA runtime unloads at exit (its atexit handler
  // was registered earlier, so it runs later): an NCCL group can still close cleanly then.
  static std::once_flag at_exit;
  std::call_once(at_exit, [] { std::atexit(destroy_process_group); });
  std::lock_guard<std::mutex> lock(g_mu);
  g_default = pg;
  g_store = rv.store;
  g_backend = options.backend;
  g_timeout = options.timeout;
  g_groups = 0;
  g_wrapper = nullptr;  // the new default group is traced only if the caller wraps it
  return pg;
}

std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks) {
  std::shared_ptr<ProcessGroup> world = default_group();
  std::shared_ptr<Store> store;
  std::string backend;
  Millis timeout;
  int id;
  GroupWrapper wrap;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    store = g_store;
    backend = g_backend;
    timeout = g_timeout;
    id = g_groups++;
    wrap = g_wrapper;
  }
  bool valid = !ranks.empty();
  for (size_t i = 0; valid && i < ranks.size(); ++i)
    valid = ranks[i] >= 0 && ranks[i] < world->size() && (i == 0 || ranks[i - 1] < ranks[i]);
  KILN_CHECK(valid, "new_group: ranks {} must be distinct, increasing and within the world of {} ranks", ranks,
             world->size());
  int index = -1;
  for (size_t i = 0; i < ranks.size(); ++i)
    if (ranks[i] == world->rank()) index = static_cast<int>(i);
  if (index < 0) return nullptr;
  auto sub = std::make_shared<PrefixStore>("group/" + std::to_string(id), store);
  const int size = static_cast<int>(ranks.size());
  std::shared_ptr<ProcessGroup> group;
  if (backend != "gloo") {
    BackendFactory factory;
    {
      std::lock_guard<std::mutex> lock(g_mu);
      factory = backends().at(backend);
    }
    group = factory(sub, index, size, timeout);
  } else {
    group = std::make_shared<ProcessGroupGloo>(sub, index, size, gloo_options(timeout));
  }
  return wrap ? wrap(std::move(group), id, ranks) : group;
}

void set_new_group_wrapper(GroupWrapper wrapper) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_wrapper = std::move(wrapper);
}

bool is_initialized() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_default != nullptr;
}

std::shared_ptr<ProcessGroup> default_group() {
  std::lock_guard<std::mutex> lock(g_mu);
  KILN_CHECK(g_default != nullptr, "default_group: call init_process_group() first");
  return g_default;
}

int get_rank() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_default ? g_default->rank() : 0;
}

int get_world_size() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_default ? g_default->size() : 1;
}

void destroy_process_group() {
  std::lock_guard<std::mutex> lock(g_mu);
  g_default = nullptr;
  g_wrapper = nullptr;
}

bool launched_with_world() {
  apply_scheduler_env();  // srun and mpirun say it in their own variables
  return std::atoi(env_or("WORLD_SIZE", "1").c_str()) > 1;
}

}  // namespace kiln::dist
