// Agreement: the coordinator's check that every rank asked for the same
// operation, and the response that follows from the requests.
//
// Pure functions over untrusted requests (they come from peers); never
// crash on malformed values, report them.
#ifndef TERSE_ENGINE_AGREEMENT_H_
#define TERSE_ENGINE_AGREEMENT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/control.pb.h"

namespace terse {

// The most ops a group may hold (Request.group_size).
inline constexpr int32_t kMaxGroupSize = 1 << 20;

// Checks one request on its own (enum values, dtype, shape, root range,
// dtype/op support). InvalidArgument naming the tensor and the rank.
absl::Status ValidateRequest(const proto::Request& request, int size);

// The response for op `name` once every rank that takes part has sent its
// request: requests[r] is rank r's request, or null when rank r has joined
// (allreduce only; it contributes zeros). EXECUTE with the agreed
// parameters, or ERROR whose message names the tensor, the parameter and the
// ranks on each side, e.g.
//   tensor 'w': shape [4] on ranks 0,2 but [5] on rank 1
// A request with `refused` set makes it an ERROR naming that rank and its
// reason. Every request must have passed ValidateRequest.
proto::Response BuildResponse(
    const std::string& name,
    const std::vector<const proto::Request*>& requests);

// "0,2,3".
std::string RankList(const std::vector<int>& ranks);

}  // namespace terse

#endif  // TERSE_ENGINE_AGREEMENT_H_
