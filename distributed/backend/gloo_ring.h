// Ring collectives built from Gloo's point-to-point primitives, used by ProcessGroupGloo when its
// ranks are not all on one host. A reduce-scatter (Gloo's options API has none): N-1 steps, each
// sending one chunk to the next rank and reducing the chunk received from the previous one, so
// each rank sends (N-1)/N of the buffer, half of what an all-reduce moves. An all-gather alike,
// each chunk received straight into its place. Each step's chunk travels in segments of about
// 256 KiB: whole chunks per step ran at half a rate-limited link's speed (Gloo's own all-gather,
// which sends them so, at 68-72 %).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "distributed/store/store.h"

namespace gloo {
class Context;
}

namespace kiln::dist {

/// `data` holds ctx.size chunks of `chunk_count` elements of `elem_size` bytes; afterwards chunk
/// ctx.rank holds the reduction (`reduce(c, a, b, n)`: c = a op b) of that chunk over all ranks
/// (the other chunks hold partial results). `tag` (the collective's sequence number) keeps its
/// messages apart from every other collective's. Throws on a timeout or a lost peer (Gloo's
/// exceptions).
void ring_reduce_scatter(gloo::Context& ctx, void* data, size_t chunk_count, size_t elem_size,
                         const std::function<void(void*, const void*, const void*, size_t)>& reduce, uint32_t tag,
                         Millis timeout);

/// `data` holds ctx.size chunks of `chunk_bytes`, chunk ctx.rank this rank's; afterwards every
/// chunk holds its rank's. A ring of N-1 steps in segments as above, each received straight into
/// its place. Throws on a timeout or a lost peer.
void ring_allgather(gloo::Context& ctx, void* data, size_t chunk_bytes, uint32_t tag, Millis timeout);

}  // namespace kiln::dist
