// Fuzz target: the negotiation messages (common/control.proto) as a rank
// receives them from its peers, through the engine's own checks.
//
// Input layout (tests/fuzz/make_corpus.cc writes seeds in it):
//   byte 0   mode = b & 1; world size = 1 + (b >> 1) % 8
//   records  u16 little-endian length, then that many bytes (cut short at
//            the end of the input)
// mode 0, rank 0's view: record i is the RequestList rank i % size sent;
//   each is parsed and given to the Coordinator (Add), and after every
//   `size` records the coordinator answers (Complete); at the end the
//   StallInspector looks at what is still pending 100 s later.
// mode 1, every other rank's view: each record is a ResponseList from rank
//   0; its cacheable responses enter a small ResponseCache, as the
//   negotiator does.
//
// Invariants: nothing crashes (ASan/UBSan watch overflow too); a rejected
// list is InvalidArgument naming a rank; every response but JOIN names an op, an
// ERROR carries its message, an executed allgather has one size per rank
// summing to its first dimension; a stalled op is named by the warning and
// fails with the shutdown error; the cache stays within its capacity, finds
// what it stored and matches the request it came from; every message
// survives a serialisation round trip.
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/control.pb.h"
#include "engine/agreement.h"
#include "engine/coordinator.h"
#include "engine/response_cache.h"
#include "engine/stall_inspector.h"
#include "engine/types.h"
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

void CheckResponses(const proto::ResponseList& out, int size) {
  CheckRoundTrip(out);
  for (const proto::Response& r : out.responses()) {
    // A JOIN response answers "every rank has joined": it has no op name.
    if (r.op() == proto::JOIN && r.kind() != proto::Response::ERROR) continue;
    if (r.names_size() == 0) FuzzFail("a response without a name");
    if (r.kind() == proto::Response::ERROR) {
      if (r.error().empty()) FuzzFail("an ERROR response without a message");
      continue;
    }
    if (r.op() == proto::ALLGATHER) {
      if (r.tensor_sizes_size() != size) {
        FuzzFail(absl::StrCat("allgather with ", r.tensor_sizes_size(),
                              " sizes for ", size, " ranks"));
      }
      int64_t total = 0;
      for (int64_t s : r.tensor_sizes()) total += s;
      if (r.shape_size() == 0 || r.shape(0) != total) {
        FuzzFail("allgather first dimension is not the sum of the sizes");
      }
    }
  }
}

void CoordinatorView(int size, InputReader* in) {
  Coordinator coordinator(size);
  StallInspector inspector(size, /*check_seconds=*/1, /*shutdown_seconds=*/2);
  Clock::time_point now{};
  std::string record;
  int i = 0;
  for (; NextRecord(in, &record); ++i) {
    now += std::chrono::milliseconds(1);
    const int from = i % size;
    proto::RequestList list;
    if (list.ParseFromString(record)) {
      CheckRoundTrip(list);
      for (const proto::Request& r : list.requests()) {
        ValidateRequest(r, size).IgnoreError();
      }
      const absl::Status st = coordinator.Add(from, list, now);
      if (!st.ok() && (st.code() != absl::StatusCode::kInvalidArgument ||
                       !absl::StrContains(st.message(), "rank"))) {
        FuzzFail(absl::StrCat("Add: ", st.ToString()));
      }
    }
    if (from == size - 1) {
      proto::ResponseList out;
      coordinator.Complete(&out);
      CheckResponses(out, size);
    }
  }
  proto::ResponseList out;
  coordinator.Complete(&out);
  CheckResponses(out, size);

  const std::vector<Coordinator::PendingOp> pending = coordinator.PendingOps();
  const std::vector<int> joined = coordinator.JoinedRanks();
  bool stalled = false;
  for (const Coordinator::PendingOp& op : pending) {
    for (int r = 0; r < size; ++r) {
      bool submitted = false, has_joined = false;
      for (int s : op.submitted) submitted |= s == r;
      for (int j : joined) has_joined |= j == r;
      stalled |= !submitted && !has_joined;
    }
  }
  const StallInspector::Verdict verdict =
      inspector.Inspect(pending, joined, now + std::chrono::seconds(100));
  if (stalled && (verdict.warning.empty() || verdict.shutdown.ok())) {
    FuzzFail("a stalled op was neither reported nor failed");
  }
  if (!stalled && (!verdict.warning.empty() || !verdict.shutdown.ok())) {
    FuzzFail(
        absl::StrCat("stall reported with nothing stalled: ", verdict.warning));
  }
}

// A request whose cached response is `r` (what Matches compares); for an
// allgather, rank 0's.
proto::Request RequestFor(const proto::Response& r) {
  proto::Request q;
  q.set_name(r.names(0));
  q.set_op(r.op());
  q.set_dtype(r.dtype());
  q.set_device(r.device());
  q.set_device_kind(r.device_kind());
  *q.mutable_shape() = r.shape();
  q.set_reduce_op(r.reduce_op());
  q.set_root_rank(r.root_rank());
  q.set_prescale(r.prescale());
  q.set_postscale(r.postscale());
  q.set_compression(r.compression());
  if (r.op() == proto::ALLGATHER && r.tensor_sizes_size() > 0 &&
      r.shape_size() > 0) {
    // Rank 0's request: its own first dimension, not the gathered one.
    q.set_rank(0);
    q.set_shape(0, r.tensor_sizes(0));
  }
  return q;
}

void WorkerView(int capacity, InputReader* in) {
  ResponseCache cache(capacity);
  std::string record;
  while (NextRecord(in, &record)) {
    proto::ResponseList list;
    if (!list.ParseFromString(record)) continue;
    CheckRoundTrip(list);
    for (const proto::Response& r : list.responses()) {
      if (!ResponseCache::Cacheable(r)) continue;
      int64_t evicted = -1;
      const int64_t slot = cache.Put(r, &evicted);
      if (cache.size() > cache.capacity()) FuzzFail("cache over capacity");
      if (capacity == 0) continue;
      if (slot < 0 || cache.Find(r.names(0)) != slot) {
        FuzzFail("the cache lost what it stored");
      }
      if (!std::isnan(r.prescale()) && !std::isnan(r.postscale()) &&
          !cache.Matches(slot, RequestFor(r))) {
        FuzzFail("a cached response does not match its own request");
      }
    }
  }
}

}  // namespace
}  // namespace fuzz
}  // namespace terse

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  terse::fuzz::InputReader in(data, size);
  const uint8_t head = in.Byte();
  const int n = 1 + (head >> 1) % 8;
  if ((head & 1) == 0) {
    terse::fuzz::CoordinatorView(n, &in);
  } else {
    terse::fuzz::WorkerView(n - 1, &in);  // Capacity 0 (off) to 7.
  }
  return 0;
}
