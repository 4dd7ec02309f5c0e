#include "core/storage.h"

namespace kiln {

StorageImpl::StorageImpl(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  data_ = allocator_for(device.type).allocate(nbytes, device);
}

StorageImpl::StorageImpl(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter)
    : data_(data), nbytes_(nbytes), device_(device), deleter_(std::move(deleter)), owned_(false) {}

StorageImpl::~StorageImpl() {
  if (owned_) {
    if (data_ != nullptr) allocator_for(device_.type).deallocate(data_, nbytes_, device_);
  } else if (deleter_) {
    deleter_(data_);
  }
}

}  // namespace kiln
