// The interposers a Profiler installs while it records (profiler.cc calls them): trampolines in
// every device kernel's dispatch slot (kernel_hooks.cc), a wrapping allocator per device type
// (allocator_hooks.cc) and the autograd engine's node observer (autograd_hook.cc).
#pragma once

#include <string>

namespace kiln::profiler::detail {

void install_kernel_hooks(bool record_shapes);
void remove_kernel_hooks();
void install_allocator_hooks();
void remove_allocator_hooks();
void install_autograd_hook();
void remove_autograd_hook();

/// The innermost scope open on this thread (kernel, backward node or user range; "" when none):
/// allocations are tagged with it. Scopes push their name and pop it when they close.
const char* current_scope();
void push_scope(const char* name);
void pop_scope();

}  // namespace kiln::profiler::detail
