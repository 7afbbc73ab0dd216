#include "engine/checkpoint_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace terse {
namespace checkpoint {
namespace {

// Bytes per read/write system call (Linux caps one call near 2 GiB).
constexpr size_t kMaxIo = size_t{1} << 30;

absl::Status SystemError(absl::string_view what, const std::string& path) {
  const int err = errno;
  return absl::Status(
      err == ENOENT ? absl::StatusCode::kNotFound : absl::StatusCode::kInternal,
      absl::StrCat(what, " ", path, ": ", std::strerror(err)));
}

}  // namespace

absl::Status StringSink::Write(absl::string_view bytes) {
  out_->append(bytes.data(), bytes.size());
  return absl::OkStatus();
}

absl::StatusOr<size_t> StringSource::Read(char* dst, size_t n) {
  const size_t got = std::min(n, bytes_.size() - at_);
  if (got > 0) std::memcpy(dst, bytes_.data() + at_, got);
  at_ += got;
  return got;
}

absl::StatusOr<std::unique_ptr<FileSink>> FileSink::Create(
    const std::string& path) {
  const std::string tmp = path + ".tmp";
  const int fd =
      ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return SystemError("cannot create", tmp);
  return std::unique_ptr<FileSink>(new FileSink(path, fd));
}

FileSink::~FileSink() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_path().c_str());
}

absl::Status FileSink::Write(absl::string_view bytes) {
  if (fd_ < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("write to ", tmp_path(), " after Commit"));
  }
  const char* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    const ssize_t n = ::write(fd_, p, std::min(left, kMaxIo));
    if (n < 0) {
      if (errno == EINTR) continue;
      return SystemError("cannot write", tmp_path());
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status FileSink::Commit() {
  if (fd_ < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(tmp_path(), " committed twice"));
  }
  if (::fsync(fd_) != 0) return SystemError("cannot fsync", tmp_path());
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) return SystemError("cannot close", tmp_path());
  if (::rename(tmp_path().c_str(), path_.c_str()) != 0) {
    return SystemError(absl::StrCat("cannot rename ", tmp_path(), " to"),
                       path_);
  }
  committed_ = true;
  // Make the rename itself durable (best effort: the data is in place).
  const size_t slash = path_.rfind('/');
  const std::string dir = slash == std::string::npos
                              ? "."
                              : path_.substr(0, std::max<size_t>(slash, 1));
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<FileSource>> FileSource::Open(
    const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return SystemError("cannot open", path);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    absl::Status status = SystemError("cannot stat", path);
    ::close(fd);
    return status;
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is not a regular file"));
  }
  return std::unique_ptr<FileSource>(
      new FileSource(path, fd, static_cast<int64_t>(st.st_size)));
}

FileSource::~FileSource() {
  if (fd_ >= 0) ::close(fd_);
}

absl::StatusOr<size_t> FileSource::Read(char* dst, size_t n) {
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::read(fd_, dst + got, std::min(n - got, kMaxIo));
    if (r < 0) {
      if (errno == EINTR) continue;
      return SystemError("cannot read", path_);
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  return got;
}

}  // namespace checkpoint
}  // namespace terse
