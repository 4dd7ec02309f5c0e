// hsdp_groups: the two process groups of hybrid sharding (fsdp.h), built on every rank in one
// order, as new_group requires: all shard groups (each data group cut into runs of shard_size
// consecutive ranks), then all replicate groups (the i-th rank of each run).
#include <numeric>

#include <fmt/ranges.h>

#include "core/error.h"
#include "distributed/backend/init.h"
#include "distributed/fsdp/fsdp.h"

namespace kiln::dist {

HsdpGroups hsdp_groups(const std::vector<std::vector<int>>& data_groups, int shard_size) {
  KILN_CHECK(!data_groups.empty(), "hsdp_groups: no data-parallel groups given");
  for (const std::vector<int>& group : data_groups) {
    const int n = static_cast<int>(group.size());
    KILN_CHECK(shard_size >= 1 && n % shard_size == 0,
               "hsdp_groups: a shard group of {} ranks does not divide the {} data-parallel ranks {} (use a divisor "
               "of {})", shard_size, n, group, n);
  }
  HsdpGroups out;
  for (const std::vector<int>& group : data_groups)
    for (size_t start = 0; start < group.size(); start += static_cast<size_t>(shard_size))
      if (auto pg = new_group({group.begin() + static_cast<std::ptrdiff_t>(start),
                               group.begin() + static_cast<std::ptrdiff_t>(start) + shard_size}))
        out.shard = pg;
  for (const std::vector<int>& group : data_groups)
    for (int i = 0; i < shard_size; ++i) {
      std::vector<int> replicas;
      for (size_t j = static_cast<size_t>(i); j < group.size(); j += static_cast<size_t>(shard_size))
        replicas.push_back(group[j]);
      if (auto pg = new_group(replicas)) out.replicate = pg;
    }
  KILN_CHECK(out.shard && out.replicate, "hsdp_groups: rank {} is in none of the data-parallel groups given",
             get_rank());
  return out;
}

HsdpGroups hsdp_groups(int shard_size) {
  std::vector<int> all(static_cast<size_t>(get_world_size()));
  std::iota(all.begin(), all.end(), 0);
  return hsdp_groups({all}, shard_size);
}

}  // namespace kiln::dist
