#include "distributed/backend/hierarchical_allreduce.h"

#include <gloo/barrier.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/device.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "distributed/backend/gloo_store.h"
#include "distributed/backend/node_identity.h"

namespace kiln::dist {
std::unique_ptr<HierarchicalAllreduce> HierarchicalAllreduce::create(
    const std::shared_ptr<Store>& store, int rank, int size, std::shared_ptr<gloo::transport::Device> device,
    Millis timeout) {
  const char* env = std::getenv("KILN_HIERARCHICAL_ALLREDUCE");
  if (size < 3 || (env != nullptr && std::string(env) == "0")) return nullptr;
  // Every rank's node, in rank order; nodes numbered by their lowest rank.
  const std::string mine = node_identity();
  store->set(fmt::format("hier/node/{}", rank), mine);
  std::vector<std::string> ids;
  std::vector<int> node_of(static_cast<size_t>(size));
  std::vector<int> count;
  for (int r = 0; r < size; ++r) {
    const std::string id = r == rank ? mine : store->get_string(fmt::format("hier/node/{}", r));
    auto it = std::find(ids.begin(), ids.end(), id);
    if (it == ids.end()) {
      ids.push_back(id);
      count.push_back(0);
      it = ids.end() - 1;
    }
    node_of[r] = static_cast<int>(it - ids.begin());
    ++count[node_of[r]];
  }
  const int nodes = static_cast<int>(ids.size());
  if (nodes < 2 || *std::max_element(count.begin(), count.end()) < 2) return nullptr;

  const int my_node = node_of[rank];
  int local_rank = 0;
  for (int r = 0; r < rank; ++r) local_rank += node_of[r] == my_node;
  auto h = std::unique_ptr<HierarchicalAllreduce>(new HierarchicalAllreduce());
  h->ranks_per_node_ = count;
  if (count[my_node] > 1) {
    h->node_ = ShmAllreduce::create(*std::make_shared<PrefixStore>(fmt::format("hier/shm/{}", my_node), store),
                                    local_rank, count[my_node], timeout);
  }
  // Every node must have its shared memory, or nobody uses the hierarchy.
  store->add(count[my_node] == 1 || h->node_ ? "hier/ok" : "hier/failed", 1);
  while (store->add("hier/ok", 0) + store->add("hier/failed", 0) < size)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (store->add("hier/failed", 0) != 0) return nullptr;

  if (local_rank == 0) {
    auto context = std::make_shared<gloo::rendezvous::Context>(my_node, nodes);
    context->setTimeout(timeout);
    GlooStore leader_store(std::make_shared<PrefixStore>("hier/gloo", store));
    context->connectFullMesh(leader_store, device);
    gloo::BarrierOptions o(context);  // every leader's connections are up before anyone uses them
    o.setTag(0);
    o.setTimeout(timeout);
    gloo::barrier(o);
    h->leaders_ = context;
  }
  return h;
}

std::string HierarchicalAllreduce::layout() const {
  const bool uniform = std::all_of(ranks_per_node_.begin(), ranks_per_node_.end(),
                                   [&](int c) { return c == ranks_per_node_.front(); });
  if (uniform) return fmt::format("{} nodes x {} ranks", ranks_per_node_.size(), ranks_per_node_.front());
  return fmt::format("{} nodes with {} ranks", ranks_per_node_.size(), fmt::join(ranks_per_node_, "/"));
}

}  // namespace kiln::dist
