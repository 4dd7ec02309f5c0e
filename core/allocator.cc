#include "core/allocator.h"

#include <cstdlib>
#include <new>

namespace kiln {
namespace {

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes, Device) override {
    if (nbytes == 0) return nullptr;
    size_t rounded = (nbytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    KILN_CHECK(p != nullptr, "cpu allocator: out of memory allocating {} bytes", nbytes);
    return p;
  }
  void deallocate(void* ptr, size_t, Device) override { std::free(ptr); }
};

Allocator* g_allocators[kNumDeviceTypes] = {};

}  // namespace

Allocator& allocator_for(DeviceType type) {
  static CpuAllocator cpu;
  if (type == DeviceType::CPU && g_allocators[0] == nullptr) return cpu;
  Allocator* a = g_allocators[static_cast<int>(type)];
  KILN_CHECK(a != nullptr, "no allocator for device type {}: this build has no {} backend linked",
             device_type_name(type), device_type_name(type));
  return *a;
}

void register_allocator(DeviceType type, Allocator* allocator) {
  g_allocators[static_cast<int>(type)] = allocator;
}

}  // namespace kiln
