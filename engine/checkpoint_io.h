// Byte sinks and sources for checkpoints (engine/checkpoint_format.h): in
// memory, or a file written crash-safely.
//
// FileSink writes to `path + ".tmp"` and only Commit() (fsync, close,
// rename over `path`) makes the bytes visible under `path`, so a crash or a
// failed save never leaves a half-written file under the final name. A sink
// destroyed without a successful Commit removes its temporary file.
//
// Errors: every failing call returns a status naming the path and the
// system error (errno text); a short read is not an error (Read returns how
// much it got), the caller reports the truncation.
//
// Ownership: StringSink appends to a string the caller owns and keeps alive;
// StringSource views bytes the caller keeps alive. File objects own their
// descriptor. Thread-safety: none; one object is used by one thread at a
// time (distinct objects are independent).
#ifndef TERSE_ENGINE_CHECKPOINT_IO_H_
#define TERSE_ENGINE_CHECKPOINT_IO_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace terse {
namespace checkpoint {

class ByteSink {
 public:
  virtual ~ByteSink() = default;
  // Appends all of `bytes` or fails.
  virtual absl::Status Write(absl::string_view bytes) = 0;
};

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Total bytes the source holds (a file's size when it was opened).
  virtual int64_t size() const = 0;
  // Reads up to n bytes at the current position into dst; returns the bytes
  // read (less than n only at the end).
  virtual absl::StatusOr<size_t> Read(char* dst, size_t n) = 0;
};

class StringSink : public ByteSink {
 public:
  explicit StringSink(std::string* out) : out_(out) {}
  absl::Status Write(absl::string_view bytes) override;

 private:
  std::string* out_;
};

class StringSource : public ByteSource {
 public:
  explicit StringSource(absl::string_view bytes) : bytes_(bytes) {}
  int64_t size() const override { return static_cast<int64_t>(bytes_.size()); }
  absl::StatusOr<size_t> Read(char* dst, size_t n) override;

 private:
  absl::string_view bytes_;
  size_t at_ = 0;
};

class FileSink : public ByteSink {
 public:
  // Creates (truncates) path + ".tmp".
  static absl::StatusOr<std::unique_ptr<FileSink>> Create(
      const std::string& path);
  ~FileSink() override;  // Removes the temporary file unless committed.
  absl::Status Write(absl::string_view bytes) override;
  // fsync, close and rename the temporary file to the final path.
  absl::Status Commit();

 private:
  FileSink(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::string tmp_path() const { return path_ + ".tmp"; }

  const std::string path_;
  int fd_ = -1;
  bool committed_ = false;
};

class FileSource : public ByteSource {
 public:
  static absl::StatusOr<std::unique_ptr<FileSource>> Open(
      const std::string& path);
  ~FileSource() override;
  int64_t size() const override { return size_; }
  absl::StatusOr<size_t> Read(char* dst, size_t n) override;

 private:
  FileSource(std::string path, int fd, int64_t size)
      : path_(std::move(path)), fd_(fd), size_(size) {}

  const std::string path_;
  int fd_ = -1;
  int64_t size_ = 0;
};

}  // namespace checkpoint
}  // namespace terse

#endif  // TERSE_ENGINE_CHECKPOINT_IO_H_
