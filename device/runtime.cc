#include "device/runtime.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace terse {

absl::Status DeviceRuntimes::Register(DeviceRuntime* runtime) {
  if (runtime == nullptr) {
    return absl::InvalidArgumentError("DeviceRuntimes::Register: null runtime");
  }
  if (runtime->kind() == Device::Kind::kCpu) {
    return absl::InvalidArgumentError(
        "DeviceRuntimes::Register: the CPU needs no device runtime");
  }
  if (!runtimes_.emplace(runtime->kind(), runtime).second) {
    return absl::AlreadyExistsError(
        absl::StrCat("a device runtime for ", Device::KindName(runtime->kind()),
                     " is already registered"));
  }
  return absl::OkStatus();
}

absl::StatusOr<DeviceRuntime*> DeviceRuntimes::Get(Device::Kind kind) const {
  auto it = runtimes_.find(kind);
  if (it == runtimes_.end()) {
    return absl::UnimplementedError(
        absl::StrCat("no device runtime is registered for ",
                     Device::KindName(kind), " tensors"));
  }
  return it->second;
}

absl::StatusOr<DeviceBuffer> DeviceBuffer::Allocate(DeviceRuntime* runtime,
                                                    int ordinal, int64_t bytes,
                                                    bool host) {
  if (runtime == nullptr || bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("DeviceBuffer::Allocate: null runtime or ", bytes,
                     " bytes"));
  }
  DeviceBuffer buffer;
  absl::StatusOr<void*> data =
      host ? runtime->AllocateHost(bytes) : runtime->Allocate(ordinal, bytes);
  if (!data.ok()) return data.status();
  buffer.runtime_ = runtime;
  buffer.data_ = *data;
  buffer.bytes_ = bytes;
  buffer.host_ = host;
  return buffer;
}

DeviceBuffer::~DeviceBuffer() { Reset(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : runtime_(std::exchange(other.runtime_, nullptr)),
      data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      host_(other.host_) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    Reset();
    runtime_ = std::exchange(other.runtime_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    host_ = other.host_;
  }
  return *this;
}

void DeviceBuffer::Reset() {
  if (runtime_ == nullptr || data_ == nullptr) return;
  absl::Status freed = host_ ? runtime_->FreeHost(data_) : runtime_->Free(data_);
  if (!freed.ok()) {
    TERSE_LOG(Error) << "freeing a device buffer: " << freed.message();
  }
  runtime_ = nullptr;
  data_ = nullptr;
  bytes_ = 0;
}

}  // namespace terse
