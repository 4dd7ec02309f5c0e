// Hierarchical all-reduce for a group spread over several nodes with several ranks on some of
// them: reduce within each node through shared memory, all-reduce among the node leaders (the
// lowest rank of each node) over Gloo's TCP ring, broadcast within each node through shared
// memory. Only the leaders touch the network, each carrying 2(m-1)/m of the data for m nodes
// where the flat ring over all n ranks makes each node send 2(n-1)/n.
//
// `create` is collective over the group. It returns null (the flat paths stay) unless the ranks
// span at least two nodes (node_identity.h: the launcher's GROUP_RANK on a host) and some node
// has two or more, and every node's shared memory could be set up; KILN_HIERARCHICAL_ALLREDUCE=0
// turns it off.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "distributed/backend/shm_allreduce.h"
#include "distributed/store/store.h"

namespace gloo {
class Context;
namespace transport {
class Device;
}
}  // namespace gloo

namespace kiln::dist {

class HierarchicalAllreduce {
 public:
  static std::unique_ptr<HierarchicalAllreduce> create(const std::shared_ptr<Store>& store, int rank, int size,
                                                       std::shared_ptr<gloo::transport::Device> device,
                                                       Millis timeout);

  /// The shared-memory group of this node (null when this node has one rank).
  ShmAllreduce* node() const { return node_.get(); }
  /// The leaders' Gloo context (null on ranks that are not their node's leader).
  const std::shared_ptr<gloo::Context>& leaders() const { return leaders_; }
  /// "2 nodes x 2 ranks".
  std::string layout() const;

 private:
  HierarchicalAllreduce() = default;
  std::unique_ptr<ShmAllreduce> node_;
  std::shared_ptr<gloo::Context> leaders_;
  std::vector<int> ranks_per_node_;
};

}  // namespace kiln::dist
