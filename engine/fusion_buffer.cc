#include "engine/fusion_buffer.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <new>
#include <utility>

#include "common/half.h"
#include "compressors/kernels/parallel.h"
#include "engine/scale.h"

namespace terse {
namespace {

constexpr std::align_val_t kAlignment{64};
// Elements cast per step (a stack buffer that stays in L1).
constexpr int64_t kCastChunk = 1024;

void CastTo(bool fp16, const float* in, uint16_t* out, int64_t n) {
  if (fp16) {
    FloatToHalf(in, out, static_cast<size_t>(n));
  } else {
    FloatToBFloat16(in, out, static_cast<size_t>(n));
  }
}

void WidenFrom(bool fp16, const uint16_t* in, float* out, int64_t n) {
  if (fp16) {
    HalfToFloat(in, out, static_cast<size_t>(n));
  } else {
    BFloat16ToFloat(in, out, static_cast<size_t>(n));
  }
}

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
    piece_ = std::exchange(other.piece_, 0);
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

int64_t FusionBuffer::Layout(const std::vector<FusionMember>& members) {
  starts_.resize(members.size());
  int64_t total = 0;
  for (size_t i = 0; i < members.size(); ++i) {
    starts_[i] = total;
    total += members[i].count;
  }
  total_ = total;
  return total;
}

template <typename Fn>
void FusionBuffer::ForEachPart(const std::vector<FusionMember>& members,
                               int64_t begin, int64_t end, Fn fn) const {
  const int64_t total = end - begin;
  const int threads = kernels::ResolveThreads(0, total, kMinElementsPerThread);
  auto range = [&](int64_t begin, int64_t end) {
    // The first member that ends after `begin`.
    size_t i = static_cast<size_t>(
        std::upper_bound(starts_.begin(), starts_.end(), begin) -
        starts_.begin());
    i = i == 0 ? 0 : i - 1;
    for (; i < members.size() && starts_[i] < end; ++i) {
      const int64_t from = std::max(begin, starts_[i]);
      const int64_t to = std::min(end, starts_[i] + members[i].count);
      if (to > from) fn(members[i], from - starts_[i], from, to - from);
    }
  };
  if (threads <= 1) {
    range(begin, end);
    return;
  }
  kernels::ParallelFor(threads, [&](int t) {
    range(begin + kernels::ChunkBegin(total, threads, t),
          begin + kernels::ChunkBegin(total, threads, t + 1));
  });
}

void* FusionBuffer::Fuse(const std::vector<FusionMember>& members,
                         DataType dtype, double prescale) {
  Prepare(members, dtype, /*piece=*/0);
  FuseRange(members, dtype, prescale, 0, total_);
  return region_;
}

void FusionBuffer::Unfuse(const std::vector<FusionMember>& members,
                          DataType dtype, double scale) {
  UnfuseRange(members, dtype, scale, 0, Layout(members));
}

void* FusionBuffer::Prepare(const std::vector<FusionMember>& members,
                            DataType dtype, int64_t piece) {
  const size_t elem = DataTypeSize(dtype);
  const int64_t total = Layout(members);
  in_outputs_ = OutputsAdjacent(members, elem);
  piece_ = 0;
  if (in_outputs_) {
    for (const FusionMember& m : members) {
      if (m.count > 0) {
        region_ = m.out;
        break;
      }
    }
  } else {
    if (piece > 0 && piece < total) piece_ = piece;
    Reserve((piece_ > 0 ? piece_ : total) * static_cast<int64_t>(elem));
    region_ = storage_;
  }
  return region_;
}

void FusionBuffer::FuseRange(const std::vector<FusionMember>& members,
                             DataType dtype, double prescale, int64_t begin,
                             int64_t end) {
  const size_t elem = DataTypeSize(dtype);
  assert(piece_ == 0 || end - begin <= piece_);
  uint8_t* region = static_cast<uint8_t*>(region_);
  const int64_t base = Base(begin);
  ForEachPart(members, begin, end,
              [&](const FusionMember& m, int64_t at, int64_t to, int64_t n) {
                uint8_t* dst = region + (to - base) * elem;
                if (m.in == nullptr) {
                  std::memset(dst, 0, n * elem);
                } else {
                  ScaledCopy(dst, static_cast<const uint8_t*>(m.in) + at * elem,
                             n, dtype, prescale);
                }
              });
}

void FusionBuffer::UnfuseRange(const std::vector<FusionMember>& members,
                               DataType dtype, double scale, int64_t begin,
                               int64_t end) {
  const size_t elem = DataTypeSize(dtype);
  assert(piece_ == 0 || end - begin <= piece_);
  const uint8_t* region = static_cast<const uint8_t*>(region_);
  const int64_t base = Base(begin);
  ForEachPart(members, begin, end,
              [&](const FusionMember& m, int64_t at, int64_t from, int64_t n) {
                if (m.out == nullptr) return;
                uint8_t* dst = static_cast<uint8_t*>(m.out) + at * elem;
                const uint8_t* src = region + (from - base) * elem;
                // In place when fused in the outputs: dst == src.
                ScaledCopy(dst, src, n, dtype, scale);
              });
}

void* FusionBuffer::FuseCast(const std::vector<FusionMember>& members,
                             DataType wire, double prescale) {
  PrepareCast(members, wire, /*piece=*/0);
  FuseCastRange(members, wire, prescale, 0, total_);
  return region_;
}

void FusionBuffer::UnfuseCast(const std::vector<FusionMember>& members,
                              DataType wire, double scale) {
  UnfuseCastRange(members, wire, scale, 0, Layout(members));
}

void* FusionBuffer::PrepareCast(const std::vector<FusionMember>& members,
                                DataType wire, int64_t piece) {
  (void)wire;  // Both wire types are 2 bytes.
  const int64_t total = Layout(members);
  in_outputs_ = false;
  piece_ = piece > 0 && piece < total ? piece : 0;
  Reserve((piece_ > 0 ? piece_ : total) * 2);
  region_ = storage_;
  return region_;
}

void FusionBuffer::FuseCastRange(const std::vector<FusionMember>& members,
                                 DataType wire, double prescale, int64_t begin,
                                 int64_t end) {
  const bool fp16 = wire == DataType::kFloat16;
  assert(piece_ == 0 || end - begin <= piece_);
  uint16_t* region = static_cast<uint16_t*>(region_);
  const int64_t base = Base(begin);
  const float f = static_cast<float>(prescale);
  ForEachPart(members, begin, end,
              [&](const FusionMember& m, int64_t at, int64_t to, int64_t n) {
                uint16_t* dst = region + (to - base);
                if (m.in == nullptr) {
                  std::memset(dst, 0, n * 2);  // +0 in both formats.
                  return;
                }
                const float* src = static_cast<const float*>(m.in) + at;
                if (prescale == 1.0) {
                  CastTo(fp16, src, dst, n);
                  return;
                }
                float tmp[kCastChunk];
                for (int64_t j = 0; j < n; j += kCastChunk) {
                  const int64_t c = std::min(kCastChunk, n - j);
                  for (int64_t k = 0; k < c; ++k) tmp[k] = src[j + k] * f;
                  CastTo(fp16, tmp, dst + j, c);
                }
              });
}

void FusionBuffer::UnfuseCastRange(const std::vector<FusionMember>& members,
                                   DataType wire, double scale, int64_t begin,
                                   int64_t end) {
  const bool fp16 = wire == DataType::kFloat16;
  assert(piece_ == 0 || end - begin <= piece_);
  const uint16_t* region = static_cast<const uint16_t*>(region_);
  const int64_t base = Base(begin);
  const float f = static_cast<float>(scale);
  ForEachPart(members, begin, end,
              [&](const FusionMember& m, int64_t at, int64_t from, int64_t n) {
                if (m.out == nullptr) return;
                float* dst = static_cast<float*>(m.out) + at;
                const uint16_t* src = region + (from - base);
                for (int64_t j = 0; j < n; j += kCastChunk) {
                  const int64_t c = std::min(kCastChunk, n - j);
                  WidenFrom(fp16, src + j, dst + j, c);
                  if (scale != 1.0) {
                    for (int64_t k = 0; k < c; ++k) dst[j + k] *= f;
                  }
                }
              });
}

}  // namespace terse
