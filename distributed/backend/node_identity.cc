#include "distributed/backend/node_identity.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>

namespace kiln::dist {

std::string node_identity() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(boot, id);
  const char* group = std::getenv("GROUP_RANK");
  return std::string(host) + "/" + id + "/" + (group != nullptr ? group : "");
}

}  // namespace kiln::dist
