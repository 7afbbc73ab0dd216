#include "engine/set_checkpoint.h"

#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace terse {
namespace set_checkpoint {
namespace {

// More world ranks than any job has: a corrupt count, not a set.
constexpr uint32_t kMaxRanks = uint32_t{1} << 24;

void PutU32(uint32_t v, std::string* out) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}

void PutU64(uint64_t v, std::string* out) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}

// Reads exactly `n` bytes or fails naming `what` and the bytes left.
class Reader {
 public:
  explicit Reader(checkpoint::ByteSource* source)
      : source_(source), left_(source->size()) {}

  int64_t left() const { return left_; }

  absl::Status Bytes(char* dst, size_t n, const std::string& what) {
    if (static_cast<int64_t>(n) > left_) {
      return absl::InvalidArgumentError(
          absl::StrCat("process-set compression checkpoint truncated in ",
                       what, ": ", n, " bytes expected, ", left_, " left"));
    }
    absl::StatusOr<size_t> got = source_->Read(dst, n);
    if (!got.ok()) return got.status();
    if (*got != n) {
      return absl::InvalidArgumentError(
          absl::StrCat("process-set compression checkpoint truncated in ",
                       what, ": ", n, " bytes expected, ", *got, " read"));
    }
    left_ -= static_cast<int64_t>(n);
    return absl::OkStatus();
  }

  absl::StatusOr<uint64_t> Unsigned(int bytes, const std::string& what) {
    unsigned char raw[8] = {};
    absl::Status read = Bytes(reinterpret_cast<char*>(raw), bytes, what);
    if (!read.ok()) return read;
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(raw[i]) << (8 * i);
    return v;
  }

 private:
  checkpoint::ByteSource* source_;
  int64_t left_;
};

}  // namespace

bool HasMagic(absl::string_view bytes) {
  return bytes.size() >= kMagic.size() &&
         bytes.substr(0, kMagic.size()) == kMagic;
}

absl::Status Write(const std::vector<Part>& parts, checkpoint::ByteSink* sink) {
  std::string head(kMagic);
  PutU32(kVersion, &head);
  PutU32(static_cast<uint32_t>(parts.size()), &head);
  absl::Status written = sink->Write(head);
  if (!written.ok()) return written;
  for (const Part& part : parts) {
    std::string meta;
    PutU32(static_cast<uint32_t>(part.id), &meta);
    PutU32(static_cast<uint32_t>(part.ranks.size()), &meta);
    for (int r : part.ranks) PutU32(static_cast<uint32_t>(r), &meta);
    PutU64(part.state.size(), &meta);
    written = sink->Write(meta);
    if (written.ok()) written = sink->Write(part.state);
    if (!written.ok()) return written;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Part>> Read(checkpoint::ByteSource* source) {
  Reader in(source);
  std::string magic(kMagic.size(), '\0');
  absl::Status read = in.Bytes(magic.data(), magic.size(), "the magic");
  if (!read.ok()) return read;
  if (magic != kMagic) {
    return absl::InvalidArgumentError(
        "not a process-set compression checkpoint (no TERSEPSC magic)");
  }
  absl::StatusOr<uint64_t> version = in.Unsigned(4, "the version");
  if (!version.ok()) return version.status();
  if (*version != kVersion) {
    return absl::InvalidArgumentError(absl::StrCat(
        "process-set compression checkpoint version ", *version,
        " is not supported (this build reads version ", kVersion, ")"));
  }
  absl::StatusOr<uint64_t> count = in.Unsigned(4, "the number of sets");
  if (!count.ok()) return count.status();
  std::vector<Part> parts;
  std::set<int32_t> seen;
  for (uint64_t p = 0; p < *count; ++p) {
    const std::string where = absl::StrCat("part ", p);
    absl::StatusOr<uint64_t> id = in.Unsigned(4, where + " (set id)");
    if (!id.ok()) return id.status();
    Part part;
    part.id = static_cast<int32_t>(static_cast<uint32_t>(*id));
    if (!seen.insert(part.id).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "process-set compression checkpoint holds set ", part.id, " twice"));
    }
    absl::StatusOr<uint64_t> n = in.Unsigned(4, where + " (rank count)");
    if (!n.ok()) return n.status();
    if (*n == 0 || *n > kMaxRanks ||
        static_cast<int64_t>(*n) * 4 > in.left()) {
      return absl::InvalidArgumentError(
          absl::StrCat("process-set compression checkpoint: set ", part.id,
                       " claims ", *n, " ranks, which does not fit the ",
                       in.left(), " bytes left"));
    }
    for (uint64_t i = 0; i < *n; ++i) {
      absl::StatusOr<uint64_t> r = in.Unsigned(4, where + " (ranks)");
      if (!r.ok()) return r.status();
      part.ranks.push_back(static_cast<int>(static_cast<uint32_t>(*r)));
    }
    absl::StatusOr<uint64_t> length = in.Unsigned(8, where + " (length)");
    if (!length.ok()) return length.status();
    if (*length > static_cast<uint64_t>(in.left())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "process-set compression checkpoint truncated in set ", part.id,
          "'s state: ", *length, " bytes expected, ", in.left(), " left"));
    }
    part.state.resize(*length);
    read = in.Bytes(part.state.data(), part.state.size(),
                    absl::StrCat("set ", part.id, "'s state"));
    if (!read.ok()) return read;
    parts.push_back(std::move(part));
  }
  if (in.left() != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("process-set compression checkpoint has ", in.left(),
                     " trailing bytes after its ", *count, " sets"));
  }
  return parts;
}

std::string DescribeLayout(const std::vector<Part>& parts) {
  std::vector<std::string> sets;
  for (const Part& part : parts) {
    sets.push_back(absl::StrCat("set ", part.id, " [",
                                absl::StrJoin(part.ranks, ","), "]"));
  }
  return absl::StrJoin(sets, ", ");
}

}  // namespace set_checkpoint
}  // namespace terse
