// A non-owning view of a flat tensor: pointer, element count, type, device.
//
// The view never owns memory; whoever creates it keeps the buffer alive until
// every operation using the view has completed (see engine/ handles).
#ifndef TERSE_COMMON_TENSOR_VIEW_H_
#define TERSE_COMMON_TENSOR_VIEW_H_

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/data_type.h"

namespace terse {

struct Device {
  enum class Kind : int32_t { kCpu = 0, kCuda = 1 };

  static Device Cpu() { return Device{Kind::kCpu, 0}; }
  static Device Cuda(int ordinal) { return Device{Kind::kCuda, ordinal}; }

  bool is_cpu() const { return kind == Kind::kCpu; }
  bool is_cuda() const { return kind == Kind::kCuda; }
  std::string ToString() const {
    return is_cpu() ? std::string("cpu") : absl::StrCat("cuda:", ordinal);
  }

  Kind kind = Kind::kCpu;
  int ordinal = 0;  // CUDA device ordinal; 0 for the CPU.
};

inline bool operator==(const Device& a, const Device& b) {
  return a.kind == b.kind && a.ordinal == b.ordinal;
}
inline bool operator!=(const Device& a, const Device& b) { return !(a == b); }

struct TensorView {
  TensorView() = default;
  TensorView(void* data, int64_t count, DataType dtype,
             Device device = Device::Cpu())
      : data(data), count(count), dtype(dtype), device(device) {}

  int64_t bytes() const {
    return count * static_cast<int64_t>(DataTypeSize(dtype));
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }

  void* data = nullptr;
  int64_t count = 0;
  DataType dtype = DataType::kFloat32;
  Device device;
};

}  // namespace terse

#endif  // TERSE_COMMON_TENSOR_VIEW_H_
