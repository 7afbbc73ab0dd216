// Fuzz target: the negotiation messages (common/control.proto) as a rank
// receives them from its peers.
//
// Input layout (tests/fuzz/make_corpus.cc writes seeds in it):
//   byte 0   mode = b & 1 (0: request lists, as rank 0 gathers them;
//            1: response lists, as every rank receives them from rank 0);
//            world size = 1 + (b >> 1) % 8
//   records  u16 little-endian length, then that many bytes (cut short at
//            the end of the input); request list i comes from rank i % size
//
// Invariants: parsing never crashes; a parsed message re-serialises to bytes
// that parse back to the same message (no field is lost or invented).
#include <string>

#include "absl/strings/str_cat.h"
#include "common/control.pb.h"
#include "tests/fuzz/fuzz_target.h"

namespace terse {
namespace fuzz {
namespace {

// Reads one length-prefixed record; false at the end of the input.
bool NextRecord(InputReader* in, std::string* record) {
  if (in->rest_size() == 0) return false;
  const size_t lo = in->Byte();
  const size_t len = lo | (static_cast<size_t>(in->Byte()) << 8);
  const size_t take = len < in->rest_size() ? len : in->rest_size();
  record->assign(reinterpret_cast<const char*>(in->rest()), take);
  in->Skip(take);
  return true;
}

template <typename Message>
void CheckRoundTrip(const Message& m) {
  const std::string wire = m.SerializeAsString();
  Message back;
  if (!back.ParseFromString(wire)) FuzzFail("re-serialised message rejected");
  if (back.SerializeAsString() != wire) {
    FuzzFail("message changed on a round trip");
  }
}

void CheckRequestLists(int size, InputReader* in) {
  std::string record;
  for (int i = 0; NextRecord(in, &record); ++i) {
    proto::RequestList list;
    if (!list.ParseFromString(record)) continue;  // Malformed: an error.
    CheckRoundTrip(list);
    (void)(i % size);
  }
}

void CheckResponseLists(InputReader* in) {
  std::string record;
  while (NextRecord(in, &record)) {
    proto::ResponseList list;
    if (!list.ParseFromString(record)) continue;
    CheckRoundTrip(list);
  }
}

}  // namespace
}  // namespace fuzz
}  // namespace terse

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  terse::fuzz::InputReader in(data, size);
  const uint8_t head = in.Byte();
  if ((head & 1) == 0) {
    terse::fuzz::CheckRequestLists(1 + (head >> 1) % 8, &in);
  } else {
    terse::fuzz::CheckResponseLists(&in);
  }
  return 0;
}
