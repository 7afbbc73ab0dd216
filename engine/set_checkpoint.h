// The compression checkpoint of a rank that belongs to non-global process
// sets: one part per set it is a member of (the global set, 0, first), each
// holding that set's id, its world ranks and its CompressedReducer
// checkpoint (engine/compressed_reducer.h, in its own format, with its own
// checksums). A rank in no non-global set writes its global reducer's
// checkpoint alone, as before process sets existed.
//
// Layout (all integers little-endian):
//   [0, 8)    magic "TERSEPSC" (the chunked format starts with "TERSECKP";
//             a serialised proto::CompressionState never starts with 'T')
//   [8, 12)   uint32 version (kVersion)
//   [12, 16)  uint32 number of parts
//   per part: int32 set id, uint32 number of ranks, int32 world ranks...,
//             uint64 state length L, then the L bytes of the set's state
//   nothing after the last part.
//
// Errors: Read fails with InvalidArgument naming what is wrong: a
// truncation (which part, what was expected and what is left), an unknown
// version, an implausible rank count or state length, a set id given twice,
// trailing bytes. It checks every length against the source's size before
// allocating.
//
// Thread-safety: reentrant; a sink or source is used by one call at a time.
#ifndef TERSE_ENGINE_SET_CHECKPOINT_H_
#define TERSE_ENGINE_SET_CHECKPOINT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/checkpoint_io.h"

namespace terse {
namespace set_checkpoint {

inline constexpr absl::string_view kMagic = "TERSEPSC";
inline constexpr uint32_t kVersion = 1;

// One set's share of the checkpoint.
struct Part {
  int32_t id = 0;
  std::vector<int> ranks;  // World ranks, sorted.
  std::string state;       // CompressedReducer::SaveState() of the set.
};

// Whether `bytes` starts with kMagic.
bool HasMagic(absl::string_view bytes);

// Writes `parts` in this order.
absl::Status Write(const std::vector<Part>& parts, checkpoint::ByteSink* sink);

// Reads and validates a whole checkpoint written by Write.
absl::StatusOr<std::vector<Part>> Read(checkpoint::ByteSource* source);

// "set 0 [0,1,2,3], set 1 [0,1]": the layout of `parts` (states ignored),
// for error messages.
std::string DescribeLayout(const std::vector<Part>& parts);

}  // namespace set_checkpoint
}  // namespace terse

#endif  // TERSE_ENGINE_SET_CHECKPOINT_H_
