#include "integration/cpp/idx_reader.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"

namespace terse {
namespace {

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzPtr = std::unique_ptr<gzFile_s, GzCloser>;

// Reads exactly `n` bytes; false on a short read.
bool ReadFully(gzFile f, void* out, int64_t n) {
  uint8_t* p = static_cast<uint8_t*>(out);
  while (n > 0) {
    const unsigned chunk =
        static_cast<unsigned>(std::min<int64_t>(n, int64_t{1} << 30));
    const int got = gzread(f, p, chunk);
    if (got <= 0) return false;
    p += got;
    n -= got;
  }
  return true;
}

}  // namespace

absl::StatusOr<IdxArray> ReadIdx(const std::string& path, int64_t max_items) {
  GzPtr file(gzopen(path.c_str(), "rb"));
  if (file == nullptr) {
    if (errno == ENOENT) {
      return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    }
    return absl::DataLossError(
        absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  auto bad = [&](absl::string_view why) {
    return absl::DataLossError(absl::StrCat(path, ": not an IDX file: ", why));
  };
  uint8_t magic[4];
  if (!ReadFully(file.get(), magic, 4)) return bad("shorter than its header");
  if (magic[0] != 0 || magic[1] != 0) return bad("bad magic");
  if (magic[2] != 0x08) return bad("element type is not unsigned byte");
  const int rank = magic[3];
  if (rank < 1 || rank > 4) return bad("number of dimensions not in 1..4");
  IdxArray array;
  int64_t per_item = 1;
  for (int d = 0; d < rank; ++d) {
    uint8_t be[4];
    if (!ReadFully(file.get(), be, 4)) return bad("truncated dimensions");
    const int64_t dim = (int64_t{be[0]} << 24) | (int64_t{be[1]} << 16) |
                        (int64_t{be[2]} << 8) | int64_t{be[3]};
    array.dims.push_back(dim);
    if (d > 0) {
      if (dim > (int64_t{1} << 16)) return bad("dimension too large");
      per_item *= dim;
    }
  }
  if (max_items > 0 && array.dims[0] > max_items) array.dims[0] = max_items;
  if (array.dims[0] > (int64_t{1} << 24)) return bad("too many items");
  const int64_t bytes = array.dims[0] * per_item;
  array.data.resize(static_cast<size_t>(bytes));
  if (!ReadFully(file.get(), array.data.data(), bytes)) {
    return absl::DataLossError(
        absl::StrCat(path, ": truncated: expected ", bytes, " data bytes"));
  }
  return array;
}

}  // namespace terse
