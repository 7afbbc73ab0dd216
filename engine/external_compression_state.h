// ExternalCompressionState: compression state that lives outside the
// CompressedReducer but belongs in its checkpoints: the error-feedback
// residuals of device buckets, kept in device memory by
// engine/device_compression.h. The reducer calls these hooks; see
// CompressedReducer::set_external_state.
//
// Calls come with the reducer at a step boundary (no step in flight, its
// lock held): ExportResiduals from SaveState's thread, OnStateLoaded from
// LoadState's, ForgetTensors from the engine's background thread. An
// implementation must be thread-safe against its own steps, which run
// inside CompressedReducer::RunExternalStep.
#ifndef TERSE_ENGINE_EXTERNAL_COMPRESSION_STATE_H_
#define TERSE_ENGINE_EXTERNAL_COMPRESSION_STATE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compressors/residual_store.h"
#include "engine/compression_state.pb.h"

namespace terse {

class ExternalCompressionState {
 public:
  virtual ~ExternalCompressionState() = default;
  // Copies of the residuals this state holds, to write next to the
  // reducer's own (keys never overlap theirs: a residual is held in one
  // place). May block for device work that produced them.
  virtual absl::StatusOr<std::vector<ResidualStore::Entry>>
  ExportResiduals() = 0;
  // Copies of the momentum-correction velocities this state holds, as
  // ExportResiduals (keys never overlap the reducer's).
  virtual absl::StatusOr<std::vector<ResidualStore::Entry>> ExportVelocities() {
    return std::vector<ResidualStore::Entry>();
  }
  // Bucket states to write with the reducer's (keys never overlap theirs):
  // each header as the reducer writes its own (policy state, warm-state
  // entries without values), and the warm states' values, one per
  // header.warm_states entry, in order.
  // `accumulator`: Accordion's accumulated gradient (empty: none), written
  // as the reducer writes its own.
  struct SavedBucket {
    proto::BucketCompressionState header;
    std::vector<std::vector<float>> warm;
    std::vector<float> accumulator;
  };
  virtual absl::StatusOr<std::vector<SavedBucket>> ExportBuckets() {
    return std::vector<SavedBucket>();
  }
  // A load replaced the reducer's state, loaded residuals included (in the
  // reducer's store): drop every residual held here; a later step takes
  // its tensors' residuals from the reducer (TakeResidual).
  virtual void OnStateLoaded() = 0;
  // The engine stopped tracking `names`: drop their residuals.
  virtual void ForgetTensors(const std::vector<std::string>& names) = 0;
};

}  // namespace terse

#endif  // TERSE_ENGINE_EXTERNAL_COMPRESSION_STATE_H_
