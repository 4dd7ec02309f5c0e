// Sends and receives through shared memory between two ranks of one host (as NCCL's P2P/SHM
// transport within a node): one segment per pair of ranks, mapped when the group is created
// (its pages are only allocated as a ring is first written), holding a byte ring per direction and a futex word per side. A send is a memcpy into the
// ring (plus a futex wake only when the peer sleeps), a receive a memcpy out: no syscall on the
// fast path. A message larger than the free space is streamed through the ring in pieces.
//
// Semantics are Gloo's: each message carries a tag; receives from a peer match that peer's
// messages of the same tag in posting order; messages of other tags (or not yet received) are
// kept aside. Sends and receives are posted without blocking and completed by wait(), which
// makes progress on every channel (so two ranks sending to each other through full rings cannot
// deadlock), polls (for KILN_SHM_SPIN_US, default 2000 us, while this host's ranks times their
// compute threads fit its cores; briefly otherwise), then sleeps on the futex. It throws
// TimeoutError naming the peer after the timeout, and PeerError within ~10 ms when the peer
// process has exited.
//
// Used by ProcessGroupGloo for peers on the same node; KILN_SHM_P2P=0 turns it off (Gloo's TCP
// pairs are used for every peer). The segment's name is unlinked as soon as both ranks have
// mapped it; a rank killed between creating a segment and its peer mapping it (during the
// group's creation) leaves one /dev/shm/kiln-p2p-* file behind.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "distributed/store/store.h"

namespace kiln::dist {

class ShmP2P {
 public:
  /// One posted send or receive (opaque to callers: hand it back to wait()).
  struct Op;

  /// Collective: publishes this rank's host (or that shared memory is off) under `store` and sets
  /// up a channel with every other rank of this host (a few store round trips each, never
  /// waiting on a peer for longer than its own set-up).
  ShmP2P(std::shared_ptr<Store> store, int rank, int size, size_t ring_bytes = kDefaultRingBytes);
  ~ShmP2P();
  ShmP2P(const ShmP2P&) = delete;
  ShmP2P& operator=(const ShmP2P&) = delete;

  /// Whether transfers with `peer` go through shared memory: both on this host, neither opted
  /// out. The answer is the same on both sides.
  bool connects(int peer) const;

  /// Posts a transfer (connects(peer) must be true). `data` must stay valid until the op
  /// completes: `keep` is held until then (a receive never waited on is still filled into it).
  std::shared_ptr<Op> send(const void* data, size_t bytes, int peer, uint64_t tag, std::shared_ptr<void> keep);
  std::shared_ptr<Op> recv(void* data, size_t bytes, int peer, uint64_t tag, std::shared_ptr<void> keep);

  /// Blocks until `op` completes, or throws (TimeoutError / PeerError naming the peer, or
  /// kiln::Error for a receive whose buffer does not match the message's size).
  void wait(Op& op, Millis timeout);

  static constexpr size_t kDefaultRingBytes = size_t{4} << 20;

 private:
  struct Channel;
  void connect(int peer);
  bool progress_locked();  // every channel; true when some op completed
  bool write_sends(Channel& ch);
  bool read_incoming(Channel& ch);
  void deliver(Channel& ch);

  std::shared_ptr<Store> store_;
  int rank_, size_;
  size_t ring_bytes_;
  long spin_us_;  // KILN_SHM_SPIN_US
  int cpus_;      // usable_cores()
  std::string me_;  // "host pid", or "" when shared memory is off
  std::mutex mu_;  // the channels' queues and ring positions
  std::vector<std::unique_ptr<Channel>> channels_;  // by peer (null for this rank); fixed after construction
  std::vector<Channel*> open_;                       // the shared-memory ones, for progress
};

}  // namespace kiln::dist
