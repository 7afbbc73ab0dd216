#include "engine/timeline.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status.h"

namespace terse {

absl::StatusOr<std::unique_ptr<Timeline>> Timeline::Open(
    const std::string& path, int rank) {
  std::unique_ptr<Timeline> timeline(new Timeline(rank));
  TERSE_RETURN_IF_ERROR(timeline->Start(path));
  return timeline;
}

std::unique_ptr<Timeline> Timeline::Stopped(int rank) {
  return std::unique_ptr<Timeline>(new Timeline(rank));
}

Timeline::Timeline(int rank) : rank_(rank) {}

absl::Status Timeline::Start(const std::string& path) {
  absl::MutexLock control(&control_mu_);
  if (closed_) {
    return absl::FailedPreconditionError("timeline: the engine has shut down");
  }
  if (file_ != nullptr) {
    return absl::FailedPreconditionError(
        "timeline: a timeline is already being written; stop it first");
  }
  std::FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("TERSE_TIMELINE='", path,
                     "': cannot open for writing: ", std::strerror(errno)));
  }
  BeginFile(file);
  return absl::OkStatus();
}

void Timeline::BeginFile(std::FILE* file) {
  file_ = file;
  origin_ = Clock::now();
  tracks_.clear();
  first_line_ = true;
  write_status_ = absl::OkStatus();
  std::fputs("[\n", file_);
  WriteLine(absl::StrCat(R"({"name":"process_name","ph":"M","pid":)", rank_,
                         R"(,"tid":0,"args":{"name":"terse rank )", rank_,
                         R"("}})"));
  {
    absl::MutexLock lock(&mu_);
    queue_.clear();
    closing_ = false;
    has_work_ = false;
  }
  writer_ = std::thread([this] { WriterLoop(); });
}

bool Timeline::active() const {
  absl::MutexLock lock(&mu_);
  return !closing_;
}

Timeline::~Timeline() { Close().IgnoreError(); }

std::string Timeline::JsonEscape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out;
}

void Timeline::Record(const std::string& track, const std::string& phase,
                      Clock::time_point start, Clock::time_point end,
                      TimelineArgs args) {
  absl::MutexLock lock(&mu_);
  if (closing_) return;
  queue_.push_back(Event{track, phase, start, end, std::move(args)});
  has_work_ = true;
}

void Timeline::WriteLine(const std::string& line) {
  if (!first_line_) std::fputs(",\n", file_);
  first_line_ = false;
  if (std::fputs(line.c_str(), file_) < 0 && write_status_.ok()) {
    write_status_ = absl::DataLossError(
        absl::StrCat("timeline: write failed: ", std::strerror(errno)));
  }
}

int Timeline::TrackId(const std::string& track) {
  for (size_t i = 0; i < tracks_.size(); ++i) {
    if (tracks_[i] == track) return static_cast<int>(i) + 1;
  }
  tracks_.push_back(track);
  const int id = static_cast<int>(tracks_.size());
  WriteLine(absl::StrCat(R"({"name":"thread_name","ph":"M","pid":)", rank_,
                         R"(,"tid":)", id, R"(,"args":{"name":")",
                         JsonEscape(track), R"("}})"));
  WriteLine(absl::StrCat(R"({"name":"thread_sort_index","ph":"M","pid":)",
                         rank_, R"(,"tid":)", id, R"(,"args":{"sort_index":)",
                         id, "}}"));
  return id;
}

void Timeline::Write(const Event& e) {
  const int tid = TrackId(e.track);
  const double ts =
      std::chrono::duration<double, std::micro>(e.start - origin_).count();
  const double dur =
      std::chrono::duration<double, std::micro>(e.end - e.start).count();
  std::string line = absl::StrCat(
      R"({"name":")", JsonEscape(e.phase), R"(","cat":"terse","ph":"X","ts":)",
      absl::StrFormat("%.3f", ts), R"(,"dur":)",
      absl::StrFormat("%.3f", dur < 0 ? 0.0 : dur), R"(,"pid":)", rank_,
      R"(,"tid":)", tid, R"(,"args":{)");
  for (size_t i = 0; i < e.args.size(); ++i) {
    absl::StrAppend(&line, i == 0 ? "" : ",", "\"", JsonEscape(e.args[i].first),
                    "\":\"", JsonEscape(e.args[i].second), "\"");
  }
  line += "}}";
  WriteLine(line);
}

void Timeline::WriterLoop() {
  while (true) {
    std::vector<Event> batch;
    bool closing;
    {
      absl::MutexLock lock(&mu_);
      // A plain flag, not a lambda: absl evaluates conditions in its own
      // (for ThreadSanitizer, unannotated) code.
      mu_.AwaitWithTimeout(absl::Condition(&has_work_), absl::Seconds(1));
      batch.swap(queue_);
      has_work_ = closing_;
      closing = closing_;
    }
    for (const Event& e : batch) Write(e);
    std::fflush(file_);
    if (closing && batch.empty()) return;
  }
}

absl::Status Timeline::Stop() {
  absl::MutexLock control(&control_mu_);
  if (file_ == nullptr) return absl::OkStatus();
  {
    absl::MutexLock lock(&mu_);
    closing_ = true;
    has_work_ = true;
  }
  if (writer_.joinable()) writer_.join();
  std::fputs("\n]\n", file_);
  if (std::fclose(file_) != 0 && write_status_.ok()) {
    write_status_ = absl::DataLossError("timeline: closing the file failed");
  }
  file_ = nullptr;
  return write_status_;
}

absl::Status Timeline::Close() {
  {
    absl::MutexLock control(&control_mu_);
    if (closed_) return absl::OkStatus();
    closed_ = true;
  }
  return Stop();
}

}  // namespace terse
