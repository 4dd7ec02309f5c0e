// The ring reduce-scatter; see gloo_ring.h.
#include "distributed/backend/gloo_ring.h"

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

/// A chunk of `count` elements cut into segments of whole elements, about kSegmentBytes each and
/// at most kMaxSegments.
struct Segments {
  size_t count, per, n;
  Segments(size_t count, size_t elem_size)
      : count(count), per(std::max<size_t>({kSegmentBytes / elem_size, (count + kMaxSegments - 1) / kMaxSegments, 1})),
        n((count + per - 1) / per) {}
  size_t offset(size_t k) const { return k * per; }
  size_t size(size_t k) const { return std::min(per, count - k * per); }
};
}  // namespace

void ring_reduce_scatter(gloo::Context& ctx, void* data, size_t chunk_count, size_t elem_size,
                         const std::function<void(void*, const void*, const void*, size_t)>& reduce, uint32_t tag,
                         Millis timeout) {
  const int n = ctx.size, r = ctx.rank;
  const size_t chunk_bytes = chunk_count * elem_size;
  if (n < 2 || chunk_bytes == 0) return;
  const Segments seg(chunk_count, elem_size);
  auto* bytes = static_cast<unsigned char*>(data);
  auto out = ctx.createUnboundBuffer(bytes, chunk_bytes * static_cast<size_t>(n));
  // Two receive buffers: segment k+1 arrives while segment k is folded in.
  std::vector<unsigned char> incoming[2];
  std::unique_ptr<gloo::transport::UnboundBuffer> in[2];
  for (int b = 0; b < 2; ++b) {
    incoming[b].resize(seg.per * elem_size);
    in[b] = ctx.createUnboundBuffer(incoming[b].data(), incoming[b].size());
  }
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  for (int step = 0; step + 1 < n; ++step) {
    // Step s: send chunk r-s-1 (complete up to this rank), receive chunk r-s-2 and fold this
    // rank's part in; at the last step the chunk received is chunk r, now summed over all ranks.
    const size_t send_chunk = static_cast<size_t>((r - step - 1 + 2 * n) % n);
    const size_t recv_chunk = static_cast<size_t>((r - step - 2 + 2 * n) % n);
    // The receives first: the previous rank sends a segment once it knows its receive is posted.
    auto post = [&](size_t k) { in[k % 2]->recv(prev, slot_of(tag, step, k), 0, seg.size(k) * elem_size); };
    post(0);
    if (seg.n > 1) post(1);
    for (size_t k = 0; k < seg.n; ++k)
      out->send(next, slot_of(tag, step, k), send_chunk * chunk_bytes + seg.offset(k) * elem_size,
                seg.size(k) * elem_size);
    for (size_t k = 0; k < seg.n; ++k) {
      if (!in[k % 2]->waitRecv(timeout))
        kiln::fail("reduce_scatter: receiving ring step {} segment {} from rank {} was aborted", step, k, prev);
      unsigned char* mine = bytes + recv_chunk * chunk_bytes + seg.offset(k) * elem_size;
      reduce(mine, mine, incoming[k % 2].data(), seg.size(k));
      if (k + 2 < seg.n) post(k + 2);
    }
    for (size_t k = 0; k < seg.n; ++k)
      if (!out->waitSend(timeout))
        kiln::fail("reduce_scatter: sending ring step {} to rank {} was aborted", step, next);
  }
}

void ring_allgather(gloo::Context& ctx, void* data, size_t chunk_bytes, uint32_t tag, Millis timeout) {
  const int n = ctx.size, r = ctx.rank;
  if (n < 2 || chunk_bytes == 0) return;
  const Segments seg(chunk_bytes, 1);
  auto* bytes = static_cast<unsigned char*>(data);
  auto buf = ctx.createUnboundBuffer(bytes, chunk_bytes * static_cast<size_t>(n));
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  for (int step = 0; step + 1 < n; ++step) {
    // Step s: pass on chunk r-s (this rank's own at step 0, then the one received last), and
    // receive chunk r-s-1 straight into its place.
    const size_t send_chunk = static_cast<size_t>((r - step + n) % n);
    const size_t recv_chunk = static_cast<size_t>((r - step - 1 + 2 * n) % n);
    for (size_t k = 0; k < seg.n; ++k) {
      buf->recv(prev, slot_of(tag, step, k), recv_chunk * chunk_bytes + seg.offset(k), seg.size(k));
      buf->send(next, slot_of(tag, step, k), send_chunk * chunk_bytes + seg.offset(k), seg.size(k));
    }
    for (size_t k = 0; k < seg.n; ++k)
      if (!buf->waitRecv(timeout))
        kiln::fail("allgather: receiving ring step {} from rank {} was aborted", step, prev);
    for (size_t k = 0; k < seg.n; ++k)
      if (!buf->waitSend(timeout)) kiln::fail("allgather: sending ring step {} to rank {} was aborted", step, next);
  }
}

}  // namespace kiln::dist
