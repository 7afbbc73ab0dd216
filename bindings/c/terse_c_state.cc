// terse_c.h's process-set, Join and introspection entry points (bucket
// reports, bytes sent, the learning-rate hook, the timeline, compression
// state) over engine/api.h.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "bindings/c/terse_c.h"
#include "bindings/c/terse_c_internal.h"
#include "engine/api.h"

struct terse_bucket_reports {
  std::vector<terse::BucketReport> reports;
};

extern "C" {

terse_error* terse_add_process_set(const int* ranks, int n, int* id) {
  if (!id) return terse::cabi::ToError(terse::cabi::CheckOut(id, "id"));
  if (n < 0 || (n > 0 && ranks == nullptr)) {
    return terse::cabi::ToError(absl::InvalidArgumentError(
        absl::StrCat("add_process_set: bad rank list of ", n)));
  }
  absl::StatusOr<int32_t> added =
      terse::AddProcessSet(std::vector<int>(ranks, ranks + n));
  if (!added.ok()) return terse::cabi::ToError(added.status());
  *id = *added;
  return nullptr;
}

terse_error* terse_remove_process_set(int id) {
  return terse::cabi::ToError(terse::RemoveProcessSet(id));
}

terse_error* terse_process_set_size(int id, int* size) {
  if (!size) return terse::cabi::ToError(terse::cabi::CheckOut(size, "size"));
  absl::StatusOr<std::vector<int>> ranks = terse::ProcessSetRanks(id);
  if (!ranks.ok()) return terse::cabi::ToError(ranks.status());
  *size = static_cast<int>(ranks->size());
  return nullptr;
}

terse_error* terse_process_set_ranks(int id, int* ranks, int capacity) {
  if (!ranks && capacity > 0) {
    return terse::cabi::ToError(terse::cabi::CheckOut(ranks, "ranks"));
  }
  absl::StatusOr<std::vector<int>> got = terse::ProcessSetRanks(id);
  if (!got.ok()) return terse::cabi::ToError(got.status());
  if (static_cast<int>(got->size()) > capacity) {
    return terse::cabi::ToError(absl::InvalidArgumentError(
        absl::StrCat("process set ", id, " has ", got->size(),
                     " ranks; capacity ", capacity)));
  }
  std::copy(got->begin(), got->end(), ranks);
  return nullptr;
}

terse_error* terse_join(int* last_rank) {
  if (!last_rank)
    return terse::cabi::ToError(terse::cabi::CheckOut(last_rank, "last_rank"));
  return terse::cabi::Store(terse::Join(), last_rank);
}

terse_error* terse_bucket_reports_get(terse_bucket_reports** reports) {
  if (!reports)
    return terse::cabi::ToError(terse::cabi::CheckOut(reports, "reports"));
  absl::StatusOr<std::vector<terse::BucketReport>> got = terse::BucketReports();
  if (!got.ok()) return terse::cabi::ToError(got.status());
  *reports = new terse_bucket_reports{*std::move(got)};
  return nullptr;
}

int terse_bucket_reports_count(const terse_bucket_reports* reports) {
  return static_cast<int>(reports->reports.size());
}

int terse_bucket_report_bucket(const terse_bucket_reports* reports, int index) {
  return reports->reports.at(index).bucket;
}

int terse_bucket_report_tensors(const terse_bucket_reports* reports,
                                int index) {
  return reports->reports.at(index).tensors;
}

int64_t terse_bucket_report_bytes(const terse_bucket_reports* reports,
                                  int index) {
  return reports->reports.at(index).bytes;
}

const char* terse_bucket_report_policy(const terse_bucket_reports* reports,
                                       int index) {
  return reports->reports.at(index).policy.c_str();
}

const char* terse_bucket_report_compressor(const terse_bucket_reports* reports,
                                           int index) {
  return reports->reports.at(index).compressor.c_str();
}

double terse_bucket_report_cf(const terse_bucket_reports* reports, int index) {
  return reports->reports.at(index).cf;
}

int64_t terse_bucket_report_bytes_sent(const terse_bucket_reports* reports,
                                       int index) {
  return reports->reports.at(index).bytes_sent;
}

int64_t terse_bucket_report_steps(const terse_bucket_reports* reports,
                                  int index) {
  return reports->reports.at(index).steps;
}

int32_t terse_bucket_report_process_set(const terse_bucket_reports* reports,
                                        int index) {
  return reports->reports.at(index).process_set;
}

void terse_bucket_reports_free(terse_bucket_reports* reports) {
  delete reports;
}

terse_error* terse_bytes_sent(int64_t* bytes) {
  if (!bytes)
    return terse::cabi::ToError(terse::cabi::CheckOut(bytes, "bytes"));
  return terse::cabi::Store(terse::BytesSent(), bytes);
}

terse_error* terse_notify_learning_rate_drop(void) {
  return terse::cabi::ToError(terse::NotifyLearningRateDrop());
}

terse_error* terse_start_timeline(const char* path) {
  if (path == nullptr || path[0] == '\0') {
    return terse::cabi::ToError(
        absl::InvalidArgumentError("start_timeline: empty file path"));
  }
  return terse::cabi::ToError(terse::StartTimeline(path));
}

terse_error* terse_stop_timeline(void) {
  return terse::cabi::ToError(terse::StopTimeline());
}

terse_error* terse_save_compression_state(char** data, size_t* size) {
  if (!data || !size) {
    return terse::cabi::ToError(terse::cabi::CheckOut(nullptr, "data or size"));
  }
  absl::StatusOr<std::string> state = terse::SaveCompressionState();
  if (!state.ok()) return terse::cabi::ToError(state.status());
  // At least one byte, so an empty state is not a NULL pointer.
  *data = static_cast<char*>(std::malloc(state->size() + 1));
  if (*data == nullptr) {
    return terse::cabi::ToError(absl::ResourceExhaustedError(
        "out of memory for the compression state"));
  }
  std::memcpy(*data, state->data(), state->size());
  *size = state->size();
  return nullptr;
}

terse_error* terse_load_compression_state(const char* data, size_t size) {
  if (data == nullptr && size > 0) {
    return terse::cabi::ToError(terse::cabi::CheckOut(data, "data"));
  }
  return terse::cabi::ToError(terse::LoadCompressionState(
      size == 0 ? std::string() : std::string(data, size)));
}

terse_error* terse_save_compression_state_to_file(const char* path) {
  if (path == nullptr)
    return terse::cabi::ToError(terse::cabi::CheckOut(path, "path"));
  return terse::cabi::ToError(terse::SaveCompressionStateToFile(path));
}

terse_error* terse_load_compression_state_from_file(const char* path) {
  if (path == nullptr)
    return terse::cabi::ToError(terse::cabi::CheckOut(path, "path"));
  return terse::cabi::ToError(terse::LoadCompressionStateFromFile(path));
}

void terse_free(void* memory) { std::free(memory); }

}  // extern "C"
