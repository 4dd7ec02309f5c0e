// Host side of the CUDA random fills: the same generator as the CPU kernels (gen.reserve(numel)
// counters), so a seed fixes the values whatever the device. Arguments were validated by
// core/ops/random.cc or creation.cc (the slots' contract in core/kernels.h).
#include "core/kernels.h"
#include "cuda/device.h"
#include "cuda/error.h"
#include "cuda/kernels/launch.h"
#include "cuda/launch_util.h"
#include "cuda/stream.h"

namespace kiln::cuda {
namespace {

void uniform_kernel(Tensor& out, Generator& gen, double low, double high) {
  const GeneratorState st = gen.reserve(static_cast<uint64_t>(out.numel()));
  DeviceGuard g(out.device());
  kern::launch_uniform(scalar_type(out.dtype()), out.data_ptr(), out.numel(), st.seed, st.offset, low, high,
                       stream_of(out));
  KILN_CUDA_CHECK_LAUNCH();
}

void normal_kernel(Tensor& out, Generator& gen, double mean, double std) {
  const GeneratorState st = gen.reserve(static_cast<uint64_t>(out.numel()));
  DeviceGuard g(out.device());
  kern::launch_normal(scalar_type(out.dtype()), out.data_ptr(), out.numel(), st.seed, st.offset, mean, std,
                      stream_of(out));
  KILN_CUDA_CHECK_LAUNCH();
}

void randint_kernel(Tensor& out, Generator& gen, int64_t low, int64_t high) {
  const GeneratorState st = gen.reserve(static_cast<uint64_t>(out.numel()));
  DeviceGuard g(out.device());
  kern::launch_randint(scalar_type(out.dtype()), out.data_ptr(), out.numel(), st.seed, st.offset, low, high,
                       stream_of(out));
  KILN_CUDA_CHECK_LAUNCH();
}

void bernoulli_kernel(Tensor& out, Generator& gen, double p) {
  const GeneratorState st = gen.reserve(static_cast<uint64_t>(out.numel()));
  DeviceGuard g(out.device());
  kern::launch_bernoulli(scalar_type(out.dtype()), out.data_ptr(), out.numel(), st.seed, st.offset, p,
                         stream_of(out));
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace

KILN_REGISTER_KERNEL(uniform, DeviceType::CUDA, &uniform_kernel);
KILN_REGISTER_KERNEL(normal, DeviceType::CUDA, &normal_kernel);
KILN_REGISTER_KERNEL(randint, DeviceType::CUDA, &randint_kernel);
KILN_REGISTER_KERNEL(bernoulli, DeviceType::CUDA, &bernoulli_kernel);

}  // namespace kiln::cuda
