// Engine: compression over every process set this rank is in (engine.h):
// reports, bytes sent, the learning-rate signal and checkpoints, gathered
// from each set's CompressedReducer. The reducers of non-global sets are
// reached through set_reducers_, which the background thread updates under
// reducers_mu_ when a set's runner is built or destroyed.
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "engine/checkpoint_io.h"
#include "engine/engine.h"

namespace terse {

void Engine::RegisterSetReducer(ProcessSetRunner& runner) {
  absl::MutexLock lock(&reducers_mu_);
  set_reducers_[runner.id()] =
      SetReducer{runner.world_ranks(), &runner.reducer()};
}

void Engine::UnregisterSetReducers(const std::vector<int32_t>& ids) {
  absl::MutexLock lock(&reducers_mu_);
  for (int32_t id : ids) {
    auto it = set_reducers_.find(id);
    if (it == set_reducers_.end()) continue;
    removed_bytes_sent_ += it->second.reducer->bytes_sent();
    set_reducers_.erase(it);
  }
}

std::vector<BucketReport> Engine::BucketReports() const {
  std::vector<BucketReport> reports = global_->reducer().Reports();
  absl::MutexLock lock(&reducers_mu_);
  for (const auto& [id, set] : set_reducers_) {
    for (BucketReport& report : set.reducer->Reports()) {
      report.process_set = id;
      reports.push_back(std::move(report));
    }
  }
  return reports;
}

int64_t Engine::BytesSent() const {
  int64_t bytes = global_->reducer().bytes_sent();
  absl::MutexLock lock(&reducers_mu_);
  bytes += removed_bytes_sent_;
  for (const auto& [id, set] : set_reducers_) bytes += set.reducer->bytes_sent();
  return bytes;
}

void Engine::NotifyLearningRateDrop() {
  global_->reducer().OnLearningRateDrop();
  absl::MutexLock lock(&reducers_mu_);
  for (const auto& [id, set] : set_reducers_) set.reducer->OnLearningRateDrop();
}

absl::StatusOr<std::vector<set_checkpoint::Part>> Engine::CompressionParts(
    bool with_states) const {
  std::vector<set_checkpoint::Part> parts(1);
  parts[0].id = 0;
  parts[0].ranks = AllRanks(size_);
  if (with_states) {
    TERSE_ASSIGN_OR_RETURN(parts[0].state, global_->reducer().SaveState());
  }
  for (const auto& [id, set] : set_reducers_) {
    set_checkpoint::Part part;
    part.id = id;
    part.ranks = set.ranks;
    if (with_states) {
      absl::StatusOr<std::string> state = set.reducer->SaveState();
      if (!state.ok()) {
        return absl::Status(state.status().code(),
                            absl::StrCat("process set ", id, ": ",
                                         state.status().message()));
      }
      part.state = *std::move(state);
    }
    parts.push_back(std::move(part));
  }
  return parts;
}

absl::StatusOr<std::string> Engine::SaveCompressionState() const {
  absl::MutexLock lock(&reducers_mu_);
  if (set_reducers_.empty()) return global_->reducer().SaveState();
  TERSE_ASSIGN_OR_RETURN(std::vector<set_checkpoint::Part> parts,
                         CompressionParts(/*with_states=*/true));
  std::string out;
  checkpoint::StringSink sink(&out);
  TERSE_RETURN_IF_ERROR(set_checkpoint::Write(parts, &sink));
  return out;
}

absl::Status Engine::SaveCompressionStateToFile(const std::string& path) const {
  absl::MutexLock lock(&reducers_mu_);
  if (set_reducers_.empty()) return global_->reducer().SaveStateToFile(path);
  TERSE_ASSIGN_OR_RETURN(std::vector<set_checkpoint::Part> parts,
                         CompressionParts(/*with_states=*/true));
  TERSE_ASSIGN_OR_RETURN(std::unique_ptr<checkpoint::FileSink> sink,
                         checkpoint::FileSink::Create(path));
  TERSE_RETURN_IF_ERROR(set_checkpoint::Write(parts, sink.get()));
  return sink->Commit();
}

absl::Status Engine::CheckGlobalOnlyLayout() const {
  if (set_reducers_.empty()) return absl::OkStatus();
  absl::StatusOr<std::vector<set_checkpoint::Part>> now =
      CompressionParts(/*with_states=*/false);
  return absl::FailedPreconditionError(absl::StrCat(
      "this compression checkpoint holds the global process set's state "
      "only (it was saved by a rank in no other process set), but this rank "
      "is now in ",
      now.ok() ? set_checkpoint::DescribeLayout(*now) : "other sets",
      "; register the same process sets as when it was saved"));
}

absl::Status Engine::LoadCompressionParts(
    std::vector<set_checkpoint::Part> parts) {
  TERSE_ASSIGN_OR_RETURN(std::vector<set_checkpoint::Part> now,
                         CompressionParts(/*with_states=*/false));
  bool same = now.size() == parts.size();
  for (size_t i = 0; same && i < parts.size(); ++i) {
    same = now[i].id == parts[i].id && now[i].ranks == parts[i].ranks;
  }
  if (!same) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the compression checkpoint holds the state of ",
        set_checkpoint::DescribeLayout(parts), ", but this rank is now in ",
        set_checkpoint::DescribeLayout(now),
        "; register the same process sets (ids and ranks) as when it was "
        "saved"));
  }
  auto reducer = [&](int32_t id) -> CompressedReducer& {
    return id == 0 ? global_->reducer() : *set_reducers_.at(id).reducer;
  };
  // Each reducer's load is all-or-nothing; keep what the earlier ones held
  // so that a failure in a later set leaves every set as it was.
  std::vector<std::string> before;
  for (const set_checkpoint::Part& part : parts) {
    TERSE_ASSIGN_OR_RETURN(std::string state, reducer(part.id).SaveState());
    before.push_back(std::move(state));
  }
  for (size_t i = 0; i < parts.size(); ++i) {
    absl::Status loaded = reducer(parts[i].id).LoadState(parts[i].state);
    if (loaded.ok()) continue;
    for (size_t j = 0; j < i; ++j) {
      reducer(parts[j].id).LoadState(before[j]).IgnoreError();
    }
    return absl::Status(loaded.code(),
                        absl::StrCat("process set ", parts[i].id, ": ",
                                     loaded.message()));
  }
  return absl::OkStatus();
}

absl::Status Engine::LoadCompressionState(absl::string_view bytes) {
  absl::MutexLock lock(&reducers_mu_);
  if (!set_checkpoint::HasMagic(bytes)) {
    TERSE_RETURN_IF_ERROR(CheckGlobalOnlyLayout());
    return global_->reducer().LoadState(bytes);
  }
  checkpoint::StringSource source(bytes);
  TERSE_ASSIGN_OR_RETURN(std::vector<set_checkpoint::Part> parts,
                         set_checkpoint::Read(&source));
  return LoadCompressionParts(std::move(parts));
}

absl::Status Engine::LoadCompressionStateFromFile(const std::string& path) {
  absl::MutexLock lock(&reducers_mu_);
  std::string magic(set_checkpoint::kMagic.size(), '\0');
  {
    TERSE_ASSIGN_OR_RETURN(std::unique_ptr<checkpoint::FileSource> peek,
                           checkpoint::FileSource::Open(path));
    TERSE_ASSIGN_OR_RETURN(size_t got, peek->Read(magic.data(), magic.size()));
    magic.resize(got);
  }
  if (!set_checkpoint::HasMagic(magic)) {
    TERSE_RETURN_IF_ERROR(CheckGlobalOnlyLayout());
    return global_->reducer().LoadStateFromFile(path);
  }
  TERSE_ASSIGN_OR_RETURN(std::unique_ptr<checkpoint::FileSource> source,
                         checkpoint::FileSource::Open(path));
  absl::StatusOr<std::vector<set_checkpoint::Part>> parts =
      set_checkpoint::Read(source.get());
  if (!parts.ok()) {
    return absl::Status(parts.status().code(),
                        absl::StrCat(path, ": ", parts.status().message()));
  }
  return LoadCompressionParts(*std::move(parts));
}

}  // namespace terse
