#include "engine/fusion_buffer.h"

#include <cstring>
#include <new>
#include <utility>

#include "engine/scale.h"

namespace terse {
namespace {

constexpr std::align_val_t kAlignment{64};

// True when every member with elements has an output and the outputs follow
// each other without gaps in member order.
bool OutputsAdjacent(const std::vector<FusionMember>& members,
                     size_t elem_size) {
  const uint8_t* expected = nullptr;
  bool any = false;
  for (const FusionMember& m : members) {
    if (m.count == 0) continue;
    if (m.out == nullptr) return false;
    const uint8_t* out = static_cast<const uint8_t*>(m.out);
    if (any && out != expected) return false;
    expected = out + m.count * elem_size;
    any = true;
  }
  return any;
}

}  // namespace

FusionBuffer::~FusionBuffer() {
  if (storage_ != nullptr) ::operator delete(storage_, kAlignment);
}

FusionBuffer::FusionBuffer(FusionBuffer&& other) noexcept {
  *this = std::move(other);
}

FusionBuffer& FusionBuffer::operator=(FusionBuffer&& other) noexcept {
  if (this != &other) {
    if (storage_ != nullptr) ::operator delete(storage_, kAlignment);
    storage_ = std::exchange(other.storage_, nullptr);
    capacity_ = std::exchange(other.capacity_, 0);
    region_ = std::exchange(other.region_, nullptr);
    in_outputs_ = std::exchange(other.in_outputs_, false);
  }
  return *this;
}

void FusionBuffer::Reserve(int64_t bytes) {
  if (bytes <= capacity_) return;
  if (storage_ != nullptr) ::operator delete(storage_, kAlignment);
  storage_ = static_cast<uint8_t*>(
      ::operator new(static_cast<size_t>(bytes), kAlignment));
  capacity_ = bytes;
}

void* FusionBuffer::Fuse(const std::vector<FusionMember>& members,
                         DataType dtype, double prescale) {
  const size_t elem = DataTypeSize(dtype);
  in_outputs_ = OutputsAdjacent(members, elem);
  if (in_outputs_) {
    for (const FusionMember& m : members) {
      if (m.count == 0) continue;
      if (m.in == nullptr) {
        std::memset(m.out, 0, m.count * elem);
      } else {
        ScaledCopy(m.out, m.in, m.count, dtype, prescale);
      }
    }
    for (const FusionMember& m : members) {
      if (m.count > 0) return region_ = m.out;
    }
  }
  int64_t total = 0;
  for (const FusionMember& m : members) total += m.count;
  Reserve(total * static_cast<int64_t>(elem));
  uint8_t* cursor = storage_;
  for (const FusionMember& m : members) {
    if (m.count == 0) continue;
    if (m.in == nullptr) {
      std::memset(cursor, 0, m.count * elem);
    } else {
      ScaledCopy(cursor, m.in, m.count, dtype, prescale);
    }
    cursor += m.count * elem;
  }
  return region_ = storage_;
}

void FusionBuffer::Unfuse(const std::vector<FusionMember>& members,
                          DataType dtype, double scale) {
  const size_t elem = DataTypeSize(dtype);
  if (in_outputs_) {
    int64_t total = 0;
    for (const FusionMember& m : members) total += m.count;
    ScaleInPlace(region_, total, dtype, scale);
    return;
  }
  const uint8_t* cursor = static_cast<const uint8_t*>(region_);
  for (const FusionMember& m : members) {
    if (m.count == 0) continue;
    if (m.out != nullptr) ScaledCopy(m.out, cursor, m.count, dtype, scale);
    cursor += m.count * elem;
  }
}

}  // namespace terse
