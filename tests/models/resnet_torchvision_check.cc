// Kiln side of tests/models:resnet_torchvision_test: loads the weights resnet_torchvision.py saved
// from torchvision's resnet18 (strictly, by name) into Kiln's ResNet-18 and compares, on the same
// input, the eval-mode logits, the train-mode logits and loss, every parameter's gradient and the
// BatchNorm buffers after the train-mode forward. f32 on both sides; tolerances (printed):
//   logits, loss:  max |kiln - torch| <= 1e-4 * max(1, max |torch|)
//   gradients:     max |kiln - torch| <= 1e-4 * max |torch| + 1e-7, per tensor
//   buffers:       max |kiln - torch| <= 1e-5 * max(1, max |torch|); num_batches_tracked equal
//     resnet_torchvision_check DIR      exit 0: all matched
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "core/ops.h"
#include "models/resnet.h"
#include "nn/nn.h"
#include "nn/safetensors.h"

using namespace kiln;

namespace {

double max_abs(const Tensor& t) { return t.to(kFloat64).abs().max().item<double>(); }

struct Report {
  int failures = 0;
  double worst = 0;  // the largest diff / tolerance seen
  /// Compares and returns max |got - want| / tol (0 when both are 0; a mismatch counts a failure).
  double check(const std::string& what, const Tensor& got, const Tensor& want, double tol, bool print = true) {
    if (got.sizes() != want.sizes()) {
      std::fprintf(stderr, "%s: shape %s vs torchvision's %s\n", what.c_str(), fmt::format("{}", got.sizes()).c_str(),
                   fmt::format("{}", want.sizes()).c_str());
      ++failures;
      return INFINITY;
    }
    const double diff = max_abs(got.to(kFloat64) - want.to(kFloat64));
    const double ratio = diff == 0 ? 0.0 : tol > 0 ? diff / tol : INFINITY;
    worst = std::max(worst, ratio);
    const bool ok = diff <= tol;
    if (print || !ok)
      std::printf("  %-36s max |diff| %.3g (tolerance %.3g)%s\n", what.c_str(), diff, tol, ok ? "" : "  MISMATCH");
    failures += !ok;
    return ratio;
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: resnet_torchvision_check DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  try {
    nn::SafetensorsContents e = nn::load_safetensors(dir + "/expected.safetensors");
    const models::ResNetOptions options{.num_classes = std::stoll(e.metadata.at("num_classes")),
                                        .in_channels = std::stoll(e.metadata.at("in_channels")),
                                        .width = 64,
                                        .small_input = e.metadata.at("small_input") == "1"};
    std::printf("torchvision %s (torch %s): num_classes %lld, in_channels %lld, small_input %d\n",
                e.metadata.at("torchvision").c_str(), e.metadata.at("torch").c_str(),
                static_cast<long long>(options.num_classes), static_cast<long long>(options.in_channels),
                options.small_input);
    models::ResNet model(options);
    model.load_state_dict(nn::load_safetensors(dir + "/weights.safetensors").tensors, /*strict=*/true);
    const Tensor x = e.tensors.at("input"), y = e.tensors.at("target");
    auto logit_tol = [&](const std::string& k) { return 1e-4 * std::max(1.0, max_abs(e.tensors.at(k))); };
    Report r;

    model.eval();
    {
      NoGradGuard g;
      r.check("eval logits", model(x), e.tensors.at("eval_logits"), logit_tol("eval_logits"));
    }
    model.train();
    Tensor logits = model(x);
    Tensor loss = nn::functional::cross_entropy(logits, y);
    loss.backward();
    r.check("train logits", logits.detach(), e.tensors.at("train_logits"), logit_tol("train_logits"));
    r.check("train loss", loss.detach().reshape({1}), e.tensors.at("loss"), logit_tol("loss"));
    double worst_grad = 0;
    std::string worst_name;
    int grads = 0;
    for (const auto& [name, p] : model.named_parameters()) {
      const Tensor& want = e.tensors.at("grad/" + name);
      const double ratio = r.check("grad " + name, p.grad(), want, 1e-4 * max_abs(want) + 1e-7, /*print=*/false);
      if (ratio > worst_grad) worst_grad = ratio, worst_name = name;
      ++grads;
    }
    std::printf("  %-36s worst diff / tolerance %.3g (%s)\n", fmt::format("gradients ({} tensors)", grads).c_str(),
                worst_grad, worst_name.c_str());
    int buffers = 0;
    for (const auto& [name, b] : model.named_buffers()) {
      const Tensor& want = e.tensors.at("after/" + name);
      const double tol = b.dtype() == kInt64 ? 0.0 : 1e-5 * std::max(1.0, max_abs(want));  // counts: exact
      r.check("buffer " + name, b, want, tol, /*print=*/false);
      ++buffers;
    }
    std::printf("  %-36s %d compared after the train-mode forward\n", "BatchNorm buffers", buffers);

    // A model of another width is refused, naming a tensor.
    models::ResNetOptions narrow = options;
    narrow.width = 32;
    models::ResNet other(narrow);
    try {
      other.load_state_dict(nn::load_safetensors(dir + "/weights.safetensors").tensors);
      std::fprintf(stderr, "a width-32 ResNet loaded width-64 weights without an error\n");
      ++r.failures;
    } catch (const Error& err) {
      std::printf("  width 32 refused: %.120s\n", err.what());
    }
    std::printf("%s: worst diff / tolerance %.3g\n", r.failures == 0 ? "MATCH" : "MISMATCH", r.worst);
    return r.failures == 0 ? 0 : 1;
  } catch (const std::exception& err) {
    std::fprintf(stderr, "resnet_torchvision_check: %s\n", err.what());
    return 1;
  }
}
