// The flat collectives' default forms: checked here once, then run through the list forms over
// views of the flat tensor (no copies beyond what the backend's list form makes).
#include "distributed/backend/process_group.h"

#include "core/error.h"
#include "core/ops.h"

namespace kiln::dist {
namespace {

/// The size() chunks of `flat`, each shaped like `chunk`; throws naming `op` when they do not fit.
std::vector<Tensor> chunks_of(const char* op, const Tensor& flat, const Tensor& chunk, int size) {
  KILN_CHECK(flat.defined() && chunk.defined(), "{}: a tensor is undefined", op);
  KILN_CHECK(flat.dtype() == chunk.dtype(), "{}: the flat tensor is {} but the chunk is {}", op, flat.dtype(),
             chunk.dtype());
  KILN_CHECK(flat.is_contiguous(), "{}: the flat tensor must be contiguous", op);
  KILN_CHECK(flat.numel() == chunk.numel() * size,
             "{}: the flat tensor has {} elements, expected {} ({} ranks x {} per chunk)", op, flat.numel(),
             chunk.numel() * size, size, chunk.numel());
  std::vector<Tensor> out;
  Tensor f = flat.reshape({flat.numel()});
  for (int r = 0; r < size; ++r) out.push_back(f.narrow(0, r * chunk.numel(), chunk.numel()).view(chunk.sizes()));
  return out;
}

}  // namespace

WorkPtr ProcessGroup::reduce_scatter_tensor(Tensor output, Tensor input, ReduceOp op) {
  return reduce_scatter(output, chunks_of("reduce_scatter_tensor", input, output, size_), op);
}

WorkPtr ProcessGroup::allgather_into_tensor(Tensor output, Tensor input) {
  return allgather(chunks_of("allgather_into_tensor", output, input, size_), input);
}

}  // namespace kiln::dist
