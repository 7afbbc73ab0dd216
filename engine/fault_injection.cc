#include "engine/fault_injection.h"

#include <cstdlib>
#include <cstring>

#include "absl/strings/numbers.h"
#include "common/logging.h"
#include "compressors/payload.h"

namespace terse {
namespace {

// The rank named by TERSE_TEST_CORRUPT_PAYLOAD_RANK, or -1.
int CorruptRank() {
  static const int rank = [] {
    const char* v = std::getenv("TERSE_TEST_CORRUPT_PAYLOAD_RANK");
    int r = -1;
    if (v == nullptr || !absl::SimpleAtoi(v, &r) || r < 0) return -1;
    return r;
  }();
  return rank;
}

}  // namespace

bool MaybeCorruptPayloadForTest(int rank, uint8_t* payload, size_t bytes) {
  if (CorruptRank() != rank || bytes < kPayloadHeaderBytes) return false;
  const uint32_t ext = LoadLe<uint32_t>(payload + 24);
  const size_t body = kPayloadHeaderBytes + ext;
  if (body >= bytes) return false;
  const size_t n = bytes - body < 4 ? bytes - body : 4;
  std::memset(payload + body, 0xff, n);
  TERSE_LOG(Warning) << "TERSE_TEST_CORRUPT_PAYLOAD_RANK: rank " << rank
                     << " corrupted its payload (test-only fault injection)";
  return true;
}

}  // namespace terse
