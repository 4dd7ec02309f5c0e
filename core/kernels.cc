// Defines the stubs declared in kernels.h (constant-initialised, so registration from any
// translation unit's static initialisers is safe).
#include "core/kernels.h"

namespace kiln::kernels {

#define KILN_DEFINE_KERNEL_(NAME, SIG) constinit KernelStub<SIG> NAME{#NAME};
KILN_KERNEL_LIST(KILN_DEFINE_KERNEL_)
#undef KILN_DEFINE_KERNEL_

}  // namespace kiln::kernels
