// FusionBuffer: a bucket's persistent staging memory and the two copy steps
// around its reduction (fuse before, unfuse after).
//
// The engine keeps one FusionBuffer per bucket for the bucket's lifetime, so
// a steady training loop allocates nothing per step. When every member of a
// bucket writes its result to memory that is adjacent in member order (for
// example gradients that are views of one flat buffer), the bucket is fused
// in the outputs themselves: no staging copy, no unfuse copy.
//
// A bucket that travels as 16 bits (fp16/bf16 cast compression) is fused by
// FuseCast straight into 16-bit staging memory, the prescale and the cast in
// one pass over the inputs, and UnfuseCast widens, scales and writes the
// outputs in one pass: no fp32 staging copy.
//
// Copies of large buckets are split over the kernel thread pool
// (compressors/kernels/parallel.h, DefaultThreads(): the cores divided among
// this host's ranks) when it has more than one thread, in contiguous element
// ranges of at least kMinElementsPerThread; the result does not depend on
// the number of threads.
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

  // The pipelined form of Fuse()/Unfuse(), for a bucket reduced a range at a
  // time (BucketExecutor): Prepare() lays out `members` and returns the
  // region (as Fuse() would, but copies nothing); FuseRange() and
  // UnfuseRange() then do Fuse()'s and Unfuse()'s copies for the region's
  // elements [begin, end) only. Every range must be fused before it is
  // reduced and unfused after; the members must be the ones passed to
  // Prepare().
  //
  // With `piece` > 0, a bucket not fused in its outputs is staged one piece
  // at a time: the region holds `piece` elements only, and FuseRange()/
  // UnfuseRange() put element `begin` of the range at the region's start
  // (end - begin must be at most `piece`; one range at a time). The same
  // few cache-resident bytes are then written, reduced and read back for
  // every piece, instead of a slice of a bucket-sized buffer that comes
  // from memory each time (about twice the copy speed on this machine,
  // docs/results/engine_speed.md). Fused in its outputs, the region is
  // the outputs and ranges stay at their own offsets.
  void* Prepare(const std::vector<FusionMember>& members, DataType dtype,
                int64_t piece = 0);
  void FuseRange(const std::vector<FusionMember>& members, DataType dtype,
                 double prescale, int64_t begin, int64_t end);
  void UnfuseRange(const std::vector<FusionMember>& members, DataType dtype,
                   double scale, int64_t begin, int64_t end);

  // Fuse() for a float32 bucket sent as `wire` (kFloat16 or kBFloat16):
  // the region (always this buffer) holds wire values,
  // round_to_nearest_even(float(in * float(prescale))). Returns the region.
  void* FuseCast(const std::vector<FusionMember>& members, DataType wire,
                 double prescale);

  // After the region of the last FuseCast() was reduced in place (as
  // `wire` values): members[i].out = float(part i) * float(scale).
  void UnfuseCast(const std::vector<FusionMember>& members, DataType wire,
                  double scale);

  // The pipelined form of FuseCast()/UnfuseCast(), as Prepare()/FuseRange()/
  // UnfuseRange() are of Fuse()/Unfuse(): PrepareCast() lays out `members`
  // and returns the (16-bit) region; the ranges are in elements.
  void* PrepareCast(const std::vector<FusionMember>& members, DataType wire,
                    int64_t piece = 0);
  void FuseCastRange(const std::vector<FusionMember>& members, DataType wire,
                     double prescale, int64_t begin, int64_t end);
  void UnfuseCastRange(const std::vector<FusionMember>& members, DataType wire,
                       double scale, int64_t begin, int64_t end);

  // Fewest elements a thread copies (1 MiB of float32).
  static constexpr int64_t kMinElementsPerThread = 1 << 18;

  // Whether the last Fuse() used the outputs in place of this buffer.
  bool fused_in_outputs() const { return in_outputs_; }
  // Whether the last Prepare()/PrepareCast() staged one piece at a time.
  bool staged_in_pieces() const { return piece_ > 0; }
  int64_t capacity_bytes() const { return capacity_; }

 private:
  void Reserve(int64_t bytes);
  // Fills starts_ with each member's first element in the region; returns
  // the total count.
  int64_t Layout(const std::vector<FusionMember>& members);
  // fn(member, first element in the member, first element in the region,
  // count) for every member part in the region's elements [begin, end),
  // split over threads (see the class comment).
  template <typename Fn>
  void ForEachPart(const std::vector<FusionMember>& members, int64_t begin,
                   int64_t end, Fn fn) const;

  std::vector<int64_t> starts_;
  int64_t total_ = 0;  // Elements of the last Layout().

  uint8_t* storage_ = nullptr;
  int64_t capacity_ = 0;
  void* region_ = nullptr;
  bool in_outputs_ = false;
  int64_t piece_ = 0;  // Elements staged at a time; 0: the whole region.
  // Element of the region at region_[0] for a range starting at `begin`.
  int64_t Base(int64_t begin) const { return piece_ > 0 ? begin : 0; }
};

}  // namespace terse

#endif  // TERSE_ENGINE_FUSION_BUFFER_H_
