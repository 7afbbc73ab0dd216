// IdxReader: reads the IDX files of (Fashion-)MNIST, gzip-compressed or not
// (zlib's gzread reads both).
//
// IDX: a 4-byte magic (two zero bytes, the element type, the number of
// dimensions), then each dimension as a big-endian uint32, then the data.
// Only unsigned bytes (type 0x08) are supported. The file is untrusted: a
// short file, a wrong magic or absurd dimensions are errors, never a crash.
#ifndef TERSE_INTEGRATION_CPP_IDX_READER_H_
#define TERSE_INTEGRATION_CPP_IDX_READER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace terse {

struct IdxArray {
  std::vector<int64_t> dims;  // dims[0] = items actually read.
  std::vector<uint8_t> data;  // Row-major, dims' product bytes.
};

// Reads at most `max_items` items (along the first dimension; <= 0: all).
// NotFound when the file does not exist; DataLoss when it is malformed or
// truncated.
absl::StatusOr<IdxArray> ReadIdx(const std::string& path, int64_t max_items);

}  // namespace terse

#endif  // TERSE_INTEGRATION_CPP_IDX_READER_H_
