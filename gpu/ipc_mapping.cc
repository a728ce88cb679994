#include "gpu/ipc_mapping.h"

#include <utility>

namespace ckpt::gpu {

IpcMapping::IpcMapping(void* device_ptr, uint64_t bytes, int device, Closer close)
    : device_ptr_(device_ptr), bytes_(bytes), device_(device), close_(std::move(close)) {}

IpcMapping::~IpcMapping() { Close(); }

IpcMapping::IpcMapping(IpcMapping&& other) noexcept
    : device_ptr_(std::exchange(other.device_ptr_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      device_(std::exchange(other.device_, -1)),
      close_(std::move(other.close_)) {}

IpcMapping& IpcMapping::operator=(IpcMapping&& other) noexcept {
  if (this != &other) {
    Close();
    device_ptr_ = std::exchange(other.device_ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    device_ = std::exchange(other.device_, -1);
    close_ = std::move(other.close_);
  }
  return *this;
}

void IpcMapping::Close() {
  if (device_ptr_ != nullptr && close_) close_(device_ptr_, device_);
  device_ptr_ = nullptr;
  close_ = nullptr;
}

}  // namespace ckpt::gpu
