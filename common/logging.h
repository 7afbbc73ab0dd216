// Rank-prefixed logging to stderr, filtered by TERSE_LOG_LEVEL.
//
//   TERSE_LOG(Warning) << "tensor " << name << " stalled";
//
// prints one line "[terse 2 W 11:48:03.512 engine.cc:120] tensor x stalled".
// A line is assembled in memory and written with one call, so lines from
// several threads or ranks never interleave mid-line.
//
// The threshold and the rank are the process's only logging state: both are
// atomics, set once by the engine at init (SetLogLevel/SetLogRank) and safe
// to read from any thread.
#ifndef TERSE_COMMON_LOGGING_H_
#define TERSE_COMMON_LOGGING_H_

#include <sstream>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace terse {

enum class LogLevel : int { kTrace = 0, kDebug, kInfo, kWarning, kError };

// "trace", "debug", "info", "warning", "error".
absl::StatusOr<LogLevel> ParseLogLevel(absl::string_view name);
absl::string_view LogLevelName(LogLevel level);

void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
// Rank shown in the prefix; -1 (the default) prints "-".
void SetLogRank(int rank);

inline bool LogEnabled(LogLevel level) { return level >= GetLogLevel(); }

// One log line; flushed by the destructor. Use through TERSE_LOG.
class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line);
  ~LogMessage();
  LogMessage(const LogMessage&) = delete;
  LogMessage& operator=(const LogMessage&) = delete;

  std::ostream& stream() { return stream_; }

 private:
  std::ostringstream stream_;
};

}  // namespace terse

#define TERSE_LOG(severity)                                           \
  if (!::terse::LogEnabled(::terse::LogLevel::k##severity)) {         \
  } else                                                              \
    ::terse::LogMessage(::terse::LogLevel::k##severity, __FILE__, __LINE__) \
        .stream()

#endif  // TERSE_COMMON_LOGGING_H_
