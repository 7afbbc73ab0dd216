// Timeline: a Chrome trace-event file (TERSE_TIMELINE) of what the engine
// does, for chrome://tracing and Perfetto.
//
// The file is the JSON Array Format: "[" then one event per line, and "]"
// when closed, so a closed file is a complete JSON document and a file cut
// short by a crash still loads in chrome://tracing. One process ("pid") per
// rank, one track ("tid", named by a metadata event) per bucket or per
// unfused op. Every phase is a complete event ("ph": "X") with microsecond
// timestamps from the timeline's start: NEGOTIATE, QUEUE, FUSE, COMPRESS,
// COMMUNICATE, DECOMPRESS, UNFUSE, with string arguments (bucket, tensors,
// bytes, compressor, cf, ...). Device buckets record FUSE, COMMUNICATE and
// UNFUSE when the engine stream reaches them (engine/device_executor.h).
//
// Thread-safe. Record() only appends to an in-memory queue under a mutex;
// a writer thread owned by the Timeline formats and writes, so the engine's
// background thread never waits on the disk.
//
// A Timeline can be stopped and started again at runtime (Horovod's
// start_timeline / stop_timeline): Stopped() makes one that writes nothing
// until Start(path); Stop() completes the current file. While stopped,
// Record() drops its event.
#ifndef TERSE_ENGINE_TIMELINE_H_
#define TERSE_ENGINE_TIMELINE_H_

#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "engine/types.h"

namespace terse {

using TimelineArgs = std::vector<std::pair<std::string, std::string>>;

class Timeline {
 public:
  // Creates (truncates) `path` and starts the writer thread. `rank` is the
  // trace's process id. Error if the file cannot be opened.
  static absl::StatusOr<std::unique_ptr<Timeline>> Open(const std::string& path,
                                                        int rank);
  // A timeline writing nothing until Start().
  static std::unique_ptr<Timeline> Stopped(int rank);
  ~Timeline();  // Close().
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  // One phase on `track`, from `start` to `end`. Ignored after Close().
  void Record(const std::string& track, const std::string& phase,
              Clock::time_point start, Clock::time_point end,
              TimelineArgs args = {});

  // Starts writing to `path` (created or truncated), timestamps from now.
  // FailedPrecondition while a file is being written or after Close();
  // InvalidArgument naming the path if it cannot be opened.
  absl::Status Start(const std::string& path);

  // Writes what is queued, terminates the JSON document, closes the file
  // and joins the writer; Start() may follow. Returns that file's first
  // write error; OK when nothing was being written.
  absl::Status Stop();

  // Whether a file is being written.
  bool active() const;

  // Stop(), after which Start() fails. Idempotent: the first call returns
  // the first write error, later calls OK.
  absl::Status Close();

  // Escapes `s` for a JSON string literal (without the quotes).
  static std::string JsonEscape(const std::string& s);

 private:
  struct Event {
    std::string track;
    std::string phase;
    Clock::time_point start;
    Clock::time_point end;
    TimelineArgs args;
  };

  explicit Timeline(int rank);
  // Caller holds control_mu_; no file is open.
  void BeginFile(std::FILE* file);
  void WriterLoop();
  // Writer thread only.
  void Write(const Event& event);
  void WriteLine(const std::string& line);
  int TrackId(const std::string& track);

  const int rank_;

  // Serialises Start/Stop/Close. While a file is open, file_, origin_ and
  // the writer-only fields below belong to the writer thread; Start sets
  // them before starting it, Stop reads them after joining it.
  absl::Mutex control_mu_;
  std::FILE* file_ = nullptr;
  Clock::time_point origin_;
  bool closed_ ABSL_GUARDED_BY(control_mu_) = false;

  mutable absl::Mutex mu_;
  std::vector<Event> queue_ ABSL_GUARDED_BY(mu_);
  // True while no file is being written (Record drops events).
  bool closing_ ABSL_GUARDED_BY(mu_) = true;
  bool has_work_ ABSL_GUARDED_BY(mu_) = false;  // Queue non-empty or closing.

  // Writer thread only (see control_mu_).
  std::vector<std::string> tracks_;
  bool first_line_ = true;
  absl::Status write_status_;

  std::thread writer_;
};

}  // namespace terse

#endif  // TERSE_ENGINE_TIMELINE_H_
