#include "core/storage.h"

#include "core/error.h"

namespace kiln {

StorageImpl::StorageImpl(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  data_ = allocator_for(device.type).allocate(nbytes, device);
}

StorageImpl::StorageImpl(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter)
    : data_(data), nbytes_(nbytes), device_(device), deleter_(std::move(deleter)), owned_(false) {}

void StorageImpl::resize_(size_t nbytes) {
  KILN_CHECK(owned_, "Storage::resize_: the storage wraps memory Kiln does not own ({} bytes on {})", nbytes_, device_);
  if (nbytes == nbytes_) return;
  Allocator& a = allocator_for(device_.type);
  if (data_ != nullptr) a.deallocate(data_, nbytes_, device_);
  data_ = nullptr;
  nbytes_ = 0;
  if (nbytes > 0) data_ = a.allocate(nbytes, device_);
  nbytes_ = nbytes;
}

StorageImpl::~StorageImpl() {
  if (owned_) {
    if (data_ != nullptr) allocator_for(device_.type).deallocate(data_, nbytes_, device_);
  } else if (deleter_) {
    deleter_(data_);
  }
}

}  // namespace kiln
