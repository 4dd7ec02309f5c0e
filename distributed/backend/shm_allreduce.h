// Collectives through shared memory for the ranks of a group that share one host. All-reduce: each rank
// copies a chunk into its slot of a segment they all map, reduces its share of the chunk
// across the slots into a result area, and copies the result back; three barriers per chunk
// (a counter and a generation word, waited on with futexes). No sockets, no kernel copies: on
// one machine this is the memory-bandwidth cost of the reduction and nothing else, so it also
// leaves the cores to compute while data parallel overlaps it with backward. Broadcast,
// reduce-scatter and all-gather (ZeRO's collectives) use the same segment and barriers.
//
// `create` is collective. It returns null (and the group uses Gloo's TCP all-reduce) unless
// every rank is on the same node (node_identity.h) and every rank could map the segment; KILN_SHM_ALLREDUCE=0
// turns it off. The segment is unlinked as soon as every rank has mapped it, so nothing is
// left behind in /dev/shm whatever happens to the processes.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "distributed/store/store.h"

namespace kiln::dist {

class ShmAllreduce {
 public:
  using ReduceFn = std::function<void(void*, const void*, const void*, size_t)>;

  static std::unique_ptr<ShmAllreduce> create(Store& store, int rank, int size, Millis timeout);
  ~ShmAllreduce();
  ShmAllreduce(const ShmAllreduce&) = delete;
  ShmAllreduce& operator=(const ShmAllreduce&) = delete;

  /// In place over `count` elements of `elem_size` bytes; `reduce(c, a, b, n)` sets c = a op b.
  /// Throws when a peer does not reach a barrier within the timeout.
  void allreduce(void* data, size_t count, size_t elem_size, const ReduceFn& reduce);

  /// Makes every rank waiting (or later arriving) at a barrier fail at once with a PeerError
  /// naming this rank: for a caller whose own part of a larger collective failed, so its
  /// node-mates do not sit out the timeout. The segment is unusable afterwards.
  void abort();

  /// Copies `bytes` of `root`'s data into every other rank's data.
  void broadcast(void* data, size_t bytes, int root);

  /// `data` holds size() chunks of `count` elements each; chunk rank() becomes the reduction over
  /// every rank's chunk rank(), in the all-reduce's order (so the same bits), and the other chunks
  /// are left as they were. Two barriers per round, and each rank reads only its own column.
  void reduce_scatter(void* data, size_t count, size_t elem_size, const ReduceFn& reduce);

  /// Rank r's `bytes` of `in` land at `out` + r * `bytes` on every rank (`in` may be that very
  /// part of `out`). Two barriers per round of kChunkBytes per rank.
  void allgather(const void* in, size_t bytes, void* out);

  static constexpr size_t kChunkBytes = size_t{4} << 20;

 private:
  struct Header;
  ShmAllreduce(void* base, size_t bytes, int rank, int size, Millis timeout);
  void barrier();
  unsigned char* slot(int r) const;
  unsigned char* result() const;

  void* base_;
  size_t bytes_;
  Header* header_;
  int rank_, size_;
  Millis timeout_;
};

}  // namespace kiln::dist
