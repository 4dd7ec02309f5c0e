// Which of cuDNN's ranked convolution algorithms to run, as pure logic a CPU test checks: the
// first runnable one whose math type keeps Kiln's precision policy and whose workspace can be
// had, with the math type to set on the convolution descriptor before running it.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <vector>

namespace kiln::cuda {

/// cudnnMathType_t without cuDNN's header.
enum class ConvMath { kDefault, kTensorOp, kTensorOpAllowConversion, kFma };

/// One entry of cudnnGetConvolution*Algorithm_v7's answer.
struct ConvCandidate {
  bool runnable = false;  ///< status == CUDNN_STATUS_SUCCESS
  ConvMath math = ConvMath::kDefault;
  size_t workspace = 0;
};

struct ConvChoice {
  size_t index = 0;  ///< into the candidates
  ConvMath math = ConvMath::kFma;
};

/// The math type to set for a candidate reporting `reported`, or nullopt when it breaks the
/// policy: `exact` (f64, or f32 without TF32) accepts FMA math only (a default-math entry is run
/// as FMA, since default math lets f32 use TF32); otherwise the candidate's own math is used.
std::optional<ConvMath> conv_math_for(bool exact, ConvMath reported);

/// The first acceptable candidate, in cuDNN's order, for which `reserve(workspace)` succeeds
/// (it allocates the workspace and returns false when the device has no memory for it).
std::optional<ConvChoice> choose_conv_algo(const std::vector<ConvCandidate>& candidates, bool exact,
                                           const std::function<bool(size_t)>& reserve);

}  // namespace kiln::cuda
