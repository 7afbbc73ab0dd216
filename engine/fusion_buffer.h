// FusionBuffer: a bucket's persistent staging memory and the two copy steps
// around its reduction (fuse before, unfuse after).
//
// The engine keeps one FusionBuffer per bucket for the bucket's lifetime, so
// a steady training loop allocates nothing per step. When every member of a
// bucket writes its result to memory that is adjacent in member order (for
// example gradients that are views of one flat buffer), the bucket is fused
// in the outputs themselves: no staging copy, no unfuse copy.
//
// Not thread-safe; used by the engine's background thread only. The member
// buffers are owned by the caller and must stay valid between Fuse() and
// Unfuse(). Inputs and outputs of different members must not overlap.
#ifndef TERSE_ENGINE_FUSION_BUFFER_H_
#define TERSE_ENGINE_FUSION_BUFFER_H_

#include <cstdint>
#include <vector>

#include "common/data_type.h"

namespace terse {

// One tensor of a fused bucket, in bucket order.
struct FusionMember {
  const void* in = nullptr;  // Null: this rank contributes zeros.
  void* out = nullptr;       // Null: the result is discarded.
  int64_t count = 0;         // Elements.
};

class FusionBuffer {
 public:
  FusionBuffer() = default;
  ~FusionBuffer();
  FusionBuffer(const FusionBuffer&) = delete;
  FusionBuffer& operator=(const FusionBuffer&) = delete;
  FusionBuffer(FusionBuffer&& other) noexcept;
  FusionBuffer& operator=(FusionBuffer&& other) noexcept;

  // Gathers `members` (all of type `dtype`) into one contiguous region,
  // multiplied by `prescale`, and returns it; the region holds the sum of
  // the members' counts. The region is either the members' outputs (when
  // adjacent, see above) or this buffer, grown as needed (64-byte aligned).
  void* Fuse(const std::vector<FusionMember>& members, DataType dtype,
             double prescale);

  // After the region returned by the last Fuse() was reduced in place:
  // writes member i's part, multiplied by `scale`, to members[i].out.
  // `members` must be the ones passed to that Fuse().
  void Unfuse(const std::vector<FusionMember>& members, DataType dtype,
              double scale);

  // Whether the last Fuse() used the outputs in place of this buffer.
  bool fused_in_outputs() const { return in_outputs_; }
  int64_t capacity_bytes() const { return capacity_; }

 private:
  void Reserve(int64_t bytes);

  uint8_t* storage_ = nullptr;
  int64_t capacity_ = 0;
  void* region_ = nullptr;
  bool in_outputs_ = false;
};

}  // namespace terse

#endif  // TERSE_ENGINE_FUSION_BUFFER_H_
