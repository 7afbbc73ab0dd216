#include "efcp/state_blob.h"

#include "absl/strings/str_cat.h"

namespace terse {
namespace efcp {
namespace {
constexpr char kMagic[4] = {'T', 'E', 'F', 'C'};
}  // namespace

BlobWriter::BlobWriter(absl::string_view kind) {
  data_.append(kMagic, sizeof(kMagic));
  PutU32(kStateBlobVersion);
  PutBytes(kind);
}

void BlobWriter::PutBytes(absl::string_view bytes) {
  PutI64(static_cast<int64_t>(bytes.size()));
  data_.append(bytes.data(), bytes.size());
}

absl::StatusOr<BlobReader> BlobReader::Open(absl::string_view blob,
                                            absl::string_view kind) {
  if (blob.size() < sizeof(kMagic) ||
      std::memcmp(blob.data(), kMagic, sizeof(kMagic)) != 0) {
    return absl::InvalidArgumentError(
        "efcp state: not a terse EFCP state blob (bad magic)");
  }
  BlobReader reader(blob.substr(sizeof(kMagic)));
  absl::StatusOr<uint32_t> version = reader.GetU32();
  if (!version.ok()) return version.status();
  if (*version != kStateBlobVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("efcp state: format version ", *version,
                     " is not supported (this build reads version ",
                     kStateBlobVersion, ")"));
  }
  absl::StatusOr<absl::string_view> got_kind = reader.GetBytes();
  if (!got_kind.ok()) return got_kind.status();
  if (*got_kind != kind) {
    return absl::InvalidArgumentError(
        absl::StrCat("efcp state: blob holds '", *got_kind,
                     "' state, expected '", kind, "'"));
  }
  return reader;
}

absl::Status BlobReader::Truncated() const {
  return absl::InvalidArgumentError(
      "efcp state: blob is truncated or a length field is corrupt");
}

absl::Status BlobReader::GetRaw(void* out, size_t n) {
  if (rest_.size() < n) return Truncated();
  std::memcpy(out, rest_.data(), n);
  rest_.remove_prefix(n);
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> BlobReader::GetU32() {
  uint32_t v;
  absl::Status s = GetRaw(&v, sizeof(v));
  if (!s.ok()) return s;
  return v;
}

absl::StatusOr<int64_t> BlobReader::GetI64() {
  int64_t v;
  absl::Status s = GetRaw(&v, sizeof(v));
  if (!s.ok()) return s;
  return v;
}

absl::StatusOr<double> BlobReader::GetF64() {
  double v;
  absl::Status s = GetRaw(&v, sizeof(v));
  if (!s.ok()) return s;
  return v;
}

absl::StatusOr<absl::string_view> BlobReader::GetBytes() {
  absl::StatusOr<int64_t> n = GetI64();
  if (!n.ok()) return n.status();
  if (*n < 0 || static_cast<uint64_t>(*n) > rest_.size()) return Truncated();
  absl::string_view bytes = rest_.substr(0, static_cast<size_t>(*n));
  rest_.remove_prefix(static_cast<size_t>(*n));
  return bytes;
}

absl::Status BlobReader::ExpectEnd() const {
  if (!rest_.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "efcp state: ", rest_.size(), " unexpected trailing bytes"));
  }
  return absl::OkStatus();
}

}  // namespace efcp
}  // namespace terse
