// Test-only fault injection for the multi-process fault tests
// (tests/fault/). Nothing here changes behaviour unless a TERSE_TEST_*
// variable is set; production code must never set one.
//
//   TERSE_TEST_CORRUPT_PAYLOAD_RANK=r
//       Rank r overwrites the first 4 body bytes of every compressed
//       payload it allgathers with 0xff (an out-of-range or malformed first
//       index for every index coding), so that every rank must reject it
//       while decoding (DESIGN §4: an error Status, never a crash).
//
// Thread-safe: the variable is read once per process.
#ifndef TERSE_ENGINE_FAULT_INJECTION_H_
#define TERSE_ENGINE_FAULT_INJECTION_H_

#include <cstddef>
#include <cstdint>

namespace terse {

// Corrupts `payload` (a payload of compressors/payload.h, `bytes` long) as
// described above when this `rank` is the one named by
// TERSE_TEST_CORRUPT_PAYLOAD_RANK; otherwise does nothing. Returns whether it
// corrupted the payload.
bool MaybeCorruptPayloadForTest(int rank, uint8_t* payload, size_t bytes);

}  // namespace terse

#endif  // TERSE_ENGINE_FAULT_INJECTION_H_
