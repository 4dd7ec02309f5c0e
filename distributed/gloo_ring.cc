// The ring reduce-scatter; see gloo_ring.h.
#include "distributed/gloo_ring.h"

#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "core/error.h"

namespace kiln::dist {
namespace {
// Slots of Kiln's own collectives: a prefix above Gloo's (0x01-0x08), the segment, the tag, the
// ring step.
constexpr uint64_t kRingSlotPrefix = 0x40;
constexpr size_t kMaxSegments = 255;  // 8 bits of the slot
// Each step's chunk travels in segments of about this size, the next received while the last is
// folded in. One message per step ran at half a rate-limited link's speed (2 namespaces, tbf 1
// Gbit/s, 16 MB: busbw 0.061 GB/s of 0.125; 200 Mbit/s: 0.012 of 0.025), with 1 MiB segments at
// 0.093 / 0.019, with 256 KiB segments at 0.119 / 0.023 (bench/multinode_allreduce.sh's --op
// reduce_scatter line).
constexpr size_t kSegmentBytes = size_t{1} << 18;

uint64_t slot_of(uint32_t tag, int step, size_t segment) {
  return (kRingSlotPrefix << 56) | (static_cast<uint64_t>(segment) << 48) | (uint64_t{tag} << 16) |
         static_cast<uint64_t>(step);
}
}  // namespace

void ring_reduce_scatter(gloo::Context& ctx, void* data, size_t chunk_count, size_t elem_size,
                         const std::function<void(void*, const void*, const void*, size_t)>& reduce, uint32_t tag,
                         Millis timeout) {
  const int n = ctx.size, r = ctx.rank;
  const size_t chunk_bytes = chunk_count * elem_size;
  if (n < 2 || chunk_bytes == 0) return;
  // Segments of whole elements, at most kMaxSegments of them.
  const size_t per_segment = std::max(kSegmentBytes / elem_size, (chunk_count + kMaxSegments - 1) / kMaxSegments);
  const size_t segments = (chunk_count + per_segment - 1) / per_segment;
  auto* bytes = static_cast<unsigned char*>(data);
  auto out = ctx.createUnboundBuffer(bytes, chunk_bytes * static_cast<size_t>(n));
  // Two receive buffers: segment k+1 arrives while segment k is folded in.
  std::vector<unsigned char> incoming[2];
  std::unique_ptr<gloo::transport::UnboundBuffer> in[2];
  for (int b = 0; b < 2; ++b) {
    incoming[b].resize(per_segment * elem_size);
    in[b] = ctx.createUnboundBuffer(incoming[b].data(), incoming[b].size());
  }
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  auto count_of = [&](size_t k) { return std::min(per_segment, chunk_count - k * per_segment); };
  for (int step = 0; step + 1 < n; ++step) {
    // Step s: send chunk r-s-1 (complete up to this rank), receive chunk r-s-2 and fold this
    // rank's part in; at the last step the chunk received is chunk r, now summed over all ranks.
    const size_t send_chunk = static_cast<size_t>((r - step - 1 + 2 * n) % n);
    const size_t recv_chunk = static_cast<size_t>((r - step - 2 + 2 * n) % n);
    for (size_t k = 0; k < segments; ++k)
      out->send(next, slot_of(tag, step, k), send_chunk * chunk_bytes + k * per_segment * elem_size,
                count_of(k) * elem_size);
    auto post = [&](size_t k) { in[k % 2]->recv(prev, slot_of(tag, step, k), 0, count_of(k) * elem_size); };
    post(0);
    if (segments > 1) post(1);
    for (size_t k = 0; k < segments; ++k) {
      if (!in[k % 2]->waitRecv(timeout))
        kiln::fail("reduce_scatter: receiving ring step {} segment {} from rank {} was aborted", step, k, prev);
      unsigned char* mine = bytes + recv_chunk * chunk_bytes + k * per_segment * elem_size;
      reduce(mine, mine, incoming[k % 2].data(), count_of(k));
      if (k + 2 < segments) post(k + 2);
    }
    for (size_t k = 0; k < segments; ++k)
      if (!out->waitSend(timeout))
        kiln::fail("reduce_scatter: sending ring step {} to rank {} was aborted", step, next);
  }
}

}  // namespace kiln::dist
