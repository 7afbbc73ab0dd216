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
  // kSim: the simulated device (device/sim_runtime.h), host memory owned by
  // a SimRuntime and streams run by worker threads, so that CI exercises the
  // device path of the engine without a GPU.
  enum class Kind : int32_t { kCpu = 0, kCuda = 1, kSim = 2 };

  static Device Cpu() { return Device{Kind::kCpu, 0}; }
  static Device Cuda(int ordinal) { return Device{Kind::kCuda, ordinal}; }
  static Device Sim(int ordinal) { return Device{Kind::kSim, ordinal}; }

  bool is_cpu() const { return kind == Kind::kCpu; }
  bool is_cuda() const { return kind == Kind::kCuda; }
  bool is_sim() const { return kind == Kind::kSim; }
  std::string ToString() const {
    if (is_cpu()) return "cpu";
    return absl::StrCat(KindName(kind), ":", ordinal);
  }
  // "cpu", "cuda", "sim" (or "device-kind-N" for an unknown value).
  static std::string KindName(Kind kind) {
    switch (kind) {
      case Kind::kCpu:
        return "cpu";
      case Kind::kCuda:
        return "cuda";
      case Kind::kSim:
        return "sim";
    }
    return absl::StrCat("device-kind-", static_cast<int32_t>(kind));
  }
  static bool IsValidKind(int32_t kind) { return kind >= 0 && kind <= 2; }

  Kind kind = Kind::kCpu;
  int ordinal = 0;  // Device ordinal within its kind; 0 for the CPU.
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
