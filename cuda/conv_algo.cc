// cuDNN convolution algorithm choice (cuda/conv_algo.h): precision policy and workspace
// fallback, with no cuDNN in it so it builds and is tested everywhere.
#include "cuda/conv_algo.h"

namespace kiln::cuda {

std::optional<ConvMath> conv_math_for(bool exact, ConvMath reported) {
  if (!exact) return reported;
  if (reported == ConvMath::kFma || reported == ConvMath::kDefault) return ConvMath::kFma;
  return std::nullopt;
}

std::optional<ConvChoice> choose_conv_algo(const std::vector<ConvCandidate>& candidates, bool exact,
                                           const std::function<bool(size_t)>& reserve) {
  for (size_t i = 0; i < candidates.size(); ++i) {
    const ConvCandidate& c = candidates[i];
    if (!c.runnable) continue;
    const std::optional<ConvMath> math = conv_math_for(exact, c.math);
    if (!math) continue;
    if (!reserve(c.workspace)) continue;  // the next algorithm may need less
    return ConvChoice{i, *math};
  }
  return std::nullopt;
}

}  // namespace kiln::cuda
