// The ring reduce-scatter; see gloo_ring.h.
#include "distributed/gloo_ring.h"

#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>

#include <vector>

#include "core/error.h"

namespace kiln::dist {
namespace {
// Slots of Kiln's own collectives: a prefix above Gloo's (0x01-0x08), the tag, the ring step.
constexpr uint64_t kRingSlotPrefix = 0x40;
}  // namespace

void ring_reduce_scatter(gloo::Context& ctx, void* data, size_t chunk_count, size_t elem_size,
                         const std::function<void(void*, const void*, const void*, size_t)>& reduce, uint32_t tag,
                         Millis timeout) {
  const int n = ctx.size, r = ctx.rank;
  const size_t chunk_bytes = chunk_count * elem_size;
  if (n < 2 || chunk_bytes == 0) return;
  auto* bytes = static_cast<unsigned char*>(data);
  std::vector<unsigned char> incoming(chunk_bytes);
  auto out = ctx.createUnboundBuffer(bytes, chunk_bytes * static_cast<size_t>(n));
  auto in = ctx.createUnboundBuffer(incoming.data(), chunk_bytes);
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  for (int step = 0; step + 1 < n; ++step) {
    // Step s: send chunk r-s-1 (complete up to this rank), receive chunk r-s-2 and fold this
    // rank's part in; at the last step the chunk received is chunk r, now summed over all ranks.
    const size_t send_chunk = static_cast<size_t>((r - step - 1 + 2 * n) % n);
    const size_t recv_chunk = static_cast<size_t>((r - step - 2 + 2 * n) % n);
    const uint64_t slot = (kRingSlotPrefix << 56) | (uint64_t{tag} << 16) | static_cast<uint64_t>(step);
    out->send(next, slot, send_chunk * chunk_bytes, chunk_bytes);
    in->recv(prev, slot, 0, chunk_bytes);
    if (!in->waitRecv(timeout)) kiln::fail("reduce_scatter: receiving ring step {} from rank {} was aborted", step, prev);
    unsigned char* mine = bytes + recv_chunk * chunk_bytes;
    reduce(mine, mine, incoming.data(), chunk_count);
    if (!out->waitSend(timeout)) kiln::fail("reduce_scatter: sending ring step {} to rank {} was aborted", step, next);
  }
}

}  // namespace kiln::dist
