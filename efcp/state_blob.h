// A versioned byte blob for preconditioner and optimizer state.
//
// Layout: the magic "TEFC", a format version (u32), a kind string naming the
// writer (e.g. "dense_mfac"), then fields in the order the writer puts them.
// Scalars and arrays are stored in host byte order (little-endian on every
// supported machine) without padding. BlobReader checks every length against
// the bytes left, so a truncated or corrupted blob is an InvalidArgument
// error, never a read out of bounds. Neither class is thread-safe; a reader
// borrows the blob, which must outlive it.
#ifndef TERSE_EFCP_STATE_BLOB_H_
#define TERSE_EFCP_STATE_BLOB_H_

#include <cstdint>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace terse {
namespace efcp {

inline constexpr uint32_t kStateBlobVersion = 1;

class BlobWriter {
 public:
  // Starts a blob of the given kind.
  explicit BlobWriter(absl::string_view kind);

  void PutU32(uint32_t v) { PutRaw(&v, sizeof(v)); }
  void PutI64(int64_t v) { PutRaw(&v, sizeof(v)); }
  void PutF64(double v) { PutRaw(&v, sizeof(v)); }
  // A length-prefixed byte string.
  void PutBytes(absl::string_view bytes);
  // `count` elements of T, without a length prefix (the reader knows it).
  template <typename T>
  void PutArray(const T* data, int64_t count) {
    PutRaw(data, static_cast<size_t>(count) * sizeof(T));
  }

  const std::string& data() const { return data_; }
  std::string Release() { return std::move(data_); }

 private:
  void PutRaw(const void* p, size_t n) {
    data_.append(static_cast<const char*>(p), n);
  }
  std::string data_;
};

class BlobReader {
 public:
  // Checks the magic, the version and that the kind equals `kind`.
  static absl::StatusOr<BlobReader> Open(absl::string_view blob,
                                         absl::string_view kind);

  absl::StatusOr<uint32_t> GetU32();
  absl::StatusOr<int64_t> GetI64();
  absl::StatusOr<double> GetF64();
  absl::StatusOr<absl::string_view> GetBytes();
  // The next count*sizeof(T) bytes, left in place: copy them out with
  // CopyArray (the blob carries no alignment guarantee).
  template <typename T>
  absl::StatusOr<const char*> GetArray(int64_t count) {
    if (count < 0 || static_cast<uint64_t>(count) > rest_.size() / sizeof(T)) {
      return Truncated();
    }
    const char* p = rest_.data();
    rest_.remove_prefix(static_cast<size_t>(count) * sizeof(T));
    return p;
  }
  template <typename T>
  static void CopyArray(const char* from, int64_t count, T* to) {
    if (count > 0)
      std::memcpy(to, from, static_cast<size_t>(count) * sizeof(T));
  }
  template <typename T>
  static T Element(const char* from, int64_t i) {
    T v;
    std::memcpy(&v, from + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
    return v;
  }

  // InvalidArgument unless every byte has been consumed.
  absl::Status ExpectEnd() const;
  int64_t remaining() const { return static_cast<int64_t>(rest_.size()); }

 private:
  explicit BlobReader(absl::string_view rest) : rest_(rest) {}
  absl::Status Truncated() const;
  absl::Status GetRaw(void* out, size_t n);

  absl::string_view rest_;
};

}  // namespace efcp
}  // namespace terse

#endif  // TERSE_EFCP_STATE_BLOB_H_
