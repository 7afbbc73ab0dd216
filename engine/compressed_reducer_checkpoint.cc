// CompressedReducer's checkpoints (compressed_reducer.h): saving and
// loading the compression state in the chunked format
// (engine/checkpoint_format.h) or, for loads, the older serialised
// proto::CompressionState.
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "engine/checkpoint_format.h"
#include "engine/compressed_reducer.h"

namespace terse {
namespace {

// Residuals and velocities of the older checkpoint format.
std::vector<ResidualStore::Entry> FromProto(
    const google::protobuf::RepeatedPtrField<proto::ResidualState>& in) {
  std::vector<ResidualStore::Entry> entries;
  for (const proto::ResidualState& r : in) {
    entries.push_back(
        {r.name(), r.tensor_offset(),
         std::vector<float>(r.values().begin(), r.values().end())});
  }
  return entries;
}

}  // namespace

void CompressedReducer::set_checkpoint_chunk_bytes(int64_t bytes) {
  absl::MutexLock lock(&mu_);
  checkpoint_chunk_bytes_ = bytes;
}

absl::Status CompressedReducer::WriteState(checkpoint::ByteSink* sink) const {
  using proto::CheckpointTensor;
  absl::MutexLock lock(&mu_, absl::Condition(&idle_));  // Step boundary.
  proto::CheckpointHeader meta;
  // Borrowed views of the state: valid while the lock is held.
  std::vector<checkpoint::TensorToWrite> tensors;
  SaveBuckets(&meta, &tensors);
  for (const auto& [key, r] : restored_) {
    proto::BucketCompressionState* b = meta.add_buckets();
    *b = r;
    b->clear_accumulator();
    if (r.accumulator_size() > 0) {
      tensors.push_back(
          {key, 0, CheckpointTensor::ACCUMULATOR,
           absl::MakeConstSpan(r.accumulator().data(), r.accumulator_size())});
    }
  }
  meta.set_bytes_sent(bytes_sent_);
  const int64_t chunk_bytes = checkpoint_chunk_bytes_;
  // Residuals held elsewhere (device buckets'), copied for this write.
  std::vector<ResidualStore::Entry> external, external_velocities;
  std::vector<ExternalCompressionState::SavedBucket> external_buckets;
  if (external_ != nullptr) {
    TERSE_ASSIGN_OR_RETURN(external, external_->ExportResiduals());
    TERSE_ASSIGN_OR_RETURN(external_velocities, external_->ExportVelocities());
    TERSE_ASSIGN_OR_RETURN(external_buckets, external_->ExportBuckets());
  }
  for (const ExternalCompressionState::SavedBucket& b : external_buckets) {
    *meta.add_buckets() = b.header;
    for (size_t i = 0; i < b.warm.size(); ++i) {
      tensors.push_back({b.header.key(), static_cast<int64_t>(i),
                         CheckpointTensor::WARM_STATE, b.warm[i]});
    }
    if (!b.accumulator.empty()) {
      tensors.push_back(
          {b.header.key(), 0, CheckpointTensor::ACCUMULATOR, b.accumulator});
    }
  }
  using Entries = std::vector<const ResidualStore::Entry*>;
  return residuals_.WithEntries([&](const Entries& residuals) {
    return momenta_.WithEntries([&](const Entries& velocities) {
      for (const ResidualStore::Entry& e : external) {
        tensors.push_back(
            {e.name, e.tensor_offset, CheckpointTensor::RESIDUAL, e.values});
      }
      for (const ResidualStore::Entry* e : residuals) {
        tensors.push_back(
            {e->name, e->tensor_offset, CheckpointTensor::RESIDUAL, e->values});
      }
      for (const ResidualStore::Entry& e : external_velocities) {
        tensors.push_back(
            {e.name, e.tensor_offset, CheckpointTensor::VELOCITY, e.values});
      }
      for (const ResidualStore::Entry* e : velocities) {
        tensors.push_back(
            {e->name, e->tensor_offset, CheckpointTensor::VELOCITY, e->values});
      }
      return checkpoint::WriteCheckpoint(meta, tensors, sink, chunk_bytes);
    });
  });
}

absl::StatusOr<std::string> CompressedReducer::SaveState() const {
  std::string out;
  checkpoint::StringSink sink(&out);
  TERSE_RETURN_IF_ERROR(WriteState(&sink));
  return out;
}

absl::Status CompressedReducer::SaveStateToFile(const std::string& path) const {
  TERSE_ASSIGN_OR_RETURN(std::unique_ptr<checkpoint::FileSink> sink,
                         checkpoint::FileSink::Create(path));
  TERSE_RETURN_IF_ERROR(WriteState(sink.get()));
  return sink->Commit();
}

absl::StatusOr<CompressedReducer::LoadedState> CompressedReducer::ParseChunked(
    checkpoint::ByteSource* source) {
  using proto::CheckpointTensor;
  TERSE_ASSIGN_OR_RETURN(checkpoint::Checkpoint ckpt,
                         checkpoint::ReadCheckpoint(source));
  LoadedState out;
  out.bytes_sent = ckpt.header.bytes_sent();
  for (proto::BucketCompressionState& b : *ckpt.header.mutable_buckets()) {
    std::string key = b.key();
    out.restored[key] = std::move(b);
  }
  std::set<std::tuple<int, std::string, int64_t, int64_t>> seen;
  for (int i = 0; i < ckpt.header.tensors_size(); ++i) {
    const CheckpointTensor& t = ckpt.header.tensors(i);
    std::vector<float>& values = ckpt.values[i];
    const std::string what = absl::StrCat(
        checkpoint::KindName(t.kind()), " '", t.name(), "' (offset ",
        t.tensor_offset(), ", ", t.count(), " floats)");
    if (!seen.insert({t.kind(), t.name(), t.tensor_offset(), t.count()})
             .second) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint holds ", what, " twice"));
    }
    switch (t.kind()) {
      case CheckpointTensor::RESIDUAL:
        out.residuals.push_back(
            {t.name(), t.tensor_offset(), std::move(values)});
        break;
      case CheckpointTensor::VELOCITY:
        out.velocities.push_back(
            {t.name(), t.tensor_offset(), std::move(values)});
        break;
      case CheckpointTensor::WARM_STATE: {
        auto bucket = out.restored.find(t.name());
        const int64_t index = t.tensor_offset();
        if (bucket == out.restored.end() || index < 0 ||
            index >= bucket->second.warm_states_size() ||
            bucket->second.warm_states(index).values_size() > 0) {
          return absl::InvalidArgumentError(absl::StrCat(
              "checkpoint's ", what,
              " has no warm-state entry at that index in its bucket's header"));
        }
        bucket->second.mutable_warm_states(index)->mutable_values()->Add(
            values.begin(), values.end());
        std::vector<float>().swap(values);
        break;
      }
      default: {  // ACCUMULATOR (ReadCheckpoint rejects unknown kinds).
        auto bucket = out.restored.find(t.name());
        if (bucket == out.restored.end() ||
            bucket->second.accumulator_size() > 0) {
          return absl::InvalidArgumentError(
              absl::StrCat("checkpoint's ", what,
                           " has no bucket state with that key in its header"));
        }
        bucket->second.mutable_accumulator()->Add(values.begin(), values.end());
        std::vector<float>().swap(values);
      }
    }
  }
  return out;
}

absl::StatusOr<CompressedReducer::LoadedState> CompressedReducer::ParseLegacy(
    absl::string_view bytes) {
  proto::CompressionState in;
  if (!in.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "compression state does not parse: neither a chunked checkpoint (it "
        "does not start with '",
        checkpoint::kMagic,
        "') nor a serialised CompressionState (not a terse checkpoint?)"));
  }
  LoadedState out;
  out.residuals = FromProto(in.residuals());
  out.velocities = FromProto(in.velocities());
  for (const proto::BucketCompressionState& b : in.buckets()) {
    out.restored[b.key()] = b;
  }
  out.bytes_sent = in.bytes_sent();
  return out;
}

absl::Status CompressedReducer::LoadState(absl::string_view bytes) {
  LoadedState loaded;
  if (checkpoint::HasMagic(bytes)) {
    checkpoint::StringSource source(bytes);
    TERSE_ASSIGN_OR_RETURN(loaded, ParseChunked(&source));
  } else {
    if (bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max())) {
      return absl::InvalidArgumentError(
          absl::StrCat("compression state of ", bytes.size(),
                       " bytes does not start with '", checkpoint::kMagic,
                       "' and is too large for the older protobuf format"));
    }
    TERSE_ASSIGN_OR_RETURN(loaded, ParseLegacy(bytes));
  }
  InstallState(std::move(loaded));
  return absl::OkStatus();
}

absl::Status CompressedReducer::LoadStateFromFile(const std::string& path) {
  TERSE_ASSIGN_OR_RETURN(std::unique_ptr<checkpoint::FileSource> source,
                         checkpoint::FileSource::Open(path));
  std::string head(checkpoint::kMagic.size(), '\0');
  TERSE_ASSIGN_OR_RETURN(const size_t got,
                         source->Read(head.data(), head.size()));
  head.resize(got);
  LoadedState loaded;
  if (checkpoint::HasMagic(head)) {
    TERSE_ASSIGN_OR_RETURN(source, checkpoint::FileSource::Open(path));
    absl::StatusOr<LoadedState> parsed = ParseChunked(source.get());
    if (!parsed.ok()) {
      return absl::Status(parsed.status().code(),
                          absl::StrCat(path, ": ", parsed.status().message()));
    }
    loaded = *std::move(parsed);
  } else {
    // The older format: a serialised CompressionState (under 2 GiB).
    if (source->size() > std::numeric_limits<int>::max()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, " does not start with '", checkpoint::kMagic,
                       "' and is too large for the older protobuf format"));
    }
    std::string bytes(static_cast<size_t>(source->size()), '\0');
    std::memcpy(bytes.data(), head.data(), head.size());
    TERSE_ASSIGN_OR_RETURN(
        const size_t rest,
        source->Read(bytes.data() + head.size(), bytes.size() - head.size()));
    bytes.resize(head.size() + rest);
    absl::StatusOr<LoadedState> parsed = ParseLegacy(bytes);
    if (!parsed.ok()) {
      return absl::Status(parsed.status().code(),
                          absl::StrCat(path, ": ", parsed.status().message()));
    }
    loaded = *std::move(parsed);
  }
  InstallState(std::move(loaded));
  return absl::OkStatus();
}

}  // namespace terse
