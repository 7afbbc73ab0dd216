#include "common/logging.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace terse {
namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::kWarning)};
std::atomic<int> g_rank{-1};

constexpr const char* kNames[] = {"trace", "debug", "info", "warning", "error"};
constexpr char kLetters[] = {'T', 'D', 'I', 'W', 'E'};

}  // namespace

absl::StatusOr<LogLevel> ParseLogLevel(absl::string_view name) {
  for (int i = 0; i < 5; ++i) {
    if (name == kNames[i]) return static_cast<LogLevel>(i);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown log level '", name, "'; accepted: trace debug info warning error"));
}

absl::string_view LogLevelName(LogLevel level) {
  return kNames[static_cast<int>(level)];
}

void SetLogLevel(LogLevel level) {
  g_level.store(static_cast<int>(level), std::memory_order_relaxed);
}

LogLevel GetLogLevel() {
  return static_cast<LogLevel>(g_level.load(std::memory_order_relaxed));
}

void SetLogRank(int rank) { g_rank.store(rank, std::memory_order_relaxed); }

LogMessage::LogMessage(LogLevel level, const char* file, int line) {
  absl::string_view base(file);
  size_t slash = base.rfind('/');
  if (slash != absl::string_view::npos) base.remove_prefix(slash + 1);
  int rank = g_rank.load(std::memory_order_relaxed);
  stream_ << "[terse " << (rank < 0 ? std::string("-") : std::to_string(rank))
          << ' ' << kLetters[static_cast<int>(level)] << ' '
          << absl::FormatTime("%H:%M:%E3S", absl::Now(), absl::LocalTimeZone())
          << ' ' << base << ':' << line << "] ";
}

LogMessage::~LogMessage() {
  stream_ << '\n';
  const std::string text = stream_.str();
  // One write(2) so concurrent lines do not interleave.
  ssize_t ignored = ::write(STDERR_FILENO, text.data(), text.size());
  (void)ignored;
}

}  // namespace terse
