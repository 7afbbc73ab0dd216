#include "engine/agreement.h"

#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "collectives/communicator.h"
#include "collectives/reduce.h"
#include "common/config.h"
#include "common/data_type.h"
#include "common/tensor_view.h"

namespace terse {
namespace {

std::string OpName(int op) {
  switch (op) {
    case proto::ALLREDUCE:
      return "allreduce";
    case proto::ALLGATHER:
      return "allgather";
    case proto::BROADCAST:
      return "broadcast";
    case proto::JOIN:
      return "join";
    case proto::BARRIER:
      return "barrier";
    case proto::ALLTOALL:
      return "alltoall";
    case proto::REDUCESCATTER:
      return "reducescatter";
  }
  return absl::StrCat("op#", op);
}

std::string Dims(const proto::Request& r, int from) {
  std::vector<int64_t> dims(r.shape().begin() + from, r.shape().end());
  return "[" + absl::StrJoin(dims, ", ") + "]";
}

// Groups the ranks by `value(request)`; empty when every present rank
// agrees, else "<what> A on ranks 0,2 but B on rank 1".
std::string Disagreement(
    const std::vector<const proto::Request*>& requests, const std::string& what,
    const std::function<std::string(const proto::Request&)>& value) {
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  for (int r = 0; r < static_cast<int>(requests.size()); ++r) {
    if (requests[r] == nullptr) continue;
    std::string v = value(*requests[r]);
    bool found = false;
    for (auto& g : groups) {
      if (g.first == v) {
        g.second.push_back(r);
        found = true;
        break;
      }
    }
    if (!found) groups.push_back({std::move(v), {r}});
  }
  if (groups.size() <= 1) return "";
  std::string out;
  for (size_t i = 0; i < groups.size(); ++i) {
    const auto& g = groups[i];
    absl::StrAppend(&out, i == 0 ? what + " " : (i == 1 ? " but " : " and "),
                    g.first, g.second.size() == 1 ? " on rank " : " on ranks ",
                    RankList(g.second));
  }
  return out;
}

}  // namespace

std::string RankList(const std::vector<int>& ranks) {
  return absl::StrJoin(ranks, ",");
}

absl::Status ValidateRequest(const proto::Request& r, int size) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", r.name(), "' from rank ", r.rank(), ": ", why));
  };
  if (r.rank() < 0 || r.rank() >= size) return bad("rank out of range");
  if (!proto::OpType_IsValid(r.op())) return bad("unknown op type");
  if (r.op() == proto::JOIN || r.op() == proto::BARRIER) {
    return absl::OkStatus();
  }
  if (r.name().empty()) return bad("empty name");
  if (r.group().empty() != (r.group_size() == 0)) {
    return bad("a group needs a name and a size");
  }
  if (r.group_size() < 0 || r.group_size() > kMaxGroupSize) {
    return bad(absl::StrCat("group size ", r.group_size(), " outside [0, ",
                            kMaxGroupSize, "]"));
  }
  // A refused op fails on every rank; its other fields (e.g. splits that do
  // not fit) are the reason, not a malformed request.
  if (!r.refused().empty()) return absl::OkStatus();
  if (!IsValidDataType(r.dtype())) return bad("unknown dtype");
  if (!proto::ReduceOp_IsValid(r.reduce_op())) return bad("unknown reduce op");
  int64_t elements = 1;
  for (int64_t d : r.shape()) {
    if (d < 0) return bad("negative dimension");
    if (d != 0 && elements > (int64_t{1} << 40) / d) {
      return bad("shape too large");
    }
    elements *= d;
  }
  if ((r.op() == proto::ALLGATHER || r.op() == proto::ALLTOALL ||
       r.op() == proto::REDUCESCATTER) &&
      r.shape_size() == 0) {
    return bad(absl::StrCat(OpName(r.op()), " needs at least one dimension"));
  }
  if (r.op() == proto::ALLTOALL) {
    if (r.splits_size() != size) {
      return bad(absl::StrCat("alltoall splits has ", r.splits_size(),
                              " entries for ", size, " ranks"));
    }
    int64_t rows = 0;
    for (int64_t s : r.splits()) {
      if (s < 0 || s > r.shape(0)) return bad("alltoall split out of range");
      rows += s;
    }
    if (rows != r.shape(0)) {
      return bad(absl::StrCat("alltoall splits sum to ", rows,
                              ", the first dimension is ", r.shape(0)));
    }
  } else if (r.splits_size() != 0) {
    return bad("splits on a non-alltoall");
  }
  if (r.op() == proto::BROADCAST &&
      (r.root_rank() < 0 || r.root_rank() >= size)) {
    return bad(
        absl::StrCat("root rank ", r.root_rank(), " outside [0, ", size, ")"));
  }
  if (!r.compression().empty()) {
    if (r.op() != proto::ALLREDUCE)
      return bad("compression on a non-allreduce");
    absl::StatusOr<CompressionRule> spec =
        ParseCompressionSpec(r.compression());
    if (!spec.ok() || CompressionSpecString(*spec) != r.compression()) {
      return bad(absl::StrCat("bad compression spec '", r.compression(), "'"));
    }
  }
  if (r.op() == proto::ALLREDUCE || r.op() == proto::REDUCESCATTER) {
    absl::Status supported = CheckReduceSupported(
        static_cast<DataType>(r.dtype()), static_cast<ReduceOp>(r.reduce_op()));
    if (!supported.ok()) return bad(supported.message());
    if (r.op() == proto::REDUCESCATTER && r.reduce_op() == proto::ADASUM) {
      return bad("reducescatter does not take adasum");
    }
  }
  return absl::OkStatus();
}

proto::Response BuildResponse(
    const std::string& name,
    const std::vector<const proto::Request*>& requests) {
  proto::Response response;
  response.add_names(name);
  const proto::Request* first = nullptr;
  for (const proto::Request* r : requests) {
    if (r != nullptr) {
      first = r;
      break;
    }
  }
  if (first == nullptr) {
    response.set_kind(proto::Response::ERROR);
    response.set_error(absl::StrCat("tensor '", name, "': no rank sent it"));
    return response;
  }
  std::vector<std::string> problems;
  for (int r = 0; r < static_cast<int>(requests.size()); ++r) {
    if (requests[r] != nullptr && !requests[r]->refused().empty()) {
      problems.push_back(
          absl::StrCat("rank ", r, " refused it: ", requests[r]->refused()));
    }
  }
  // An ERROR response naming every problem found.
  auto failed = [&] {
    response.set_kind(proto::Response::ERROR);
    response.set_op(first->op());
    response.set_error(
        absl::StrCat("tensor '", name, "': ", absl::StrJoin(problems, "; ")));
    return response;
  };
  if (!problems.empty()) return failed();
  auto check = [&](const std::string& what,
                   const std::function<std::string(const proto::Request&)>& f) {
    std::string d = Disagreement(requests, what, f);
    if (!d.empty()) problems.push_back(std::move(d));
  };
  check("op", [](const proto::Request& r) { return OpName(r.op()); });
  check("group", [](const proto::Request& r) {
    return r.group().empty()
               ? std::string("none")
               : absl::StrCat("'", r.group(), "' of ", r.group_size(), " ops");
  });
  if (problems.empty()) {
    check("dtype", [](const proto::Request& r) {
      return std::string(DataTypeName(static_cast<DataType>(r.dtype())));
    });
    check("device", [](const proto::Request& r) {
      return Device::KindName(static_cast<Device::Kind>(r.device_kind()));
    });
    switch (first->op()) {
      case proto::ALLREDUCE:
      case proto::REDUCESCATTER:
        check("reduce op", [](const proto::Request& r) {
          return std::string(
              ReduceOpName(static_cast<ReduceOp>(r.reduce_op())));
        });
        check("shape", [](const proto::Request& r) { return Dims(r, 0); });
        check("prescale", [](const proto::Request& r) {
          return absl::StrFormat("%.17g", r.prescale());
        });
        check("postscale", [](const proto::Request& r) {
          return absl::StrFormat("%.17g", r.postscale());
        });
        if (first->op() != proto::ALLREDUCE) break;
        check("compression", [](const proto::Request& r) {
          return r.compression().empty()
                     ? std::string("default (engine policy)")
                     : r.compression();
        });
        break;
      case proto::BROADCAST:
        check("shape", [](const proto::Request& r) { return Dims(r, 0); });
        check("root rank", [](const proto::Request& r) {
          return absl::StrCat(r.root_rank());
        });
        break;
      case proto::ALLGATHER:
      case proto::ALLTOALL:
        check("dimensions after the first",
              [](const proto::Request& r) { return Dims(r, 1); });
        break;
      case proto::BARRIER:
        // A barrier's shape is empty, except the engine's process-set
        // changes, which carry the set's ranks (or id) there.
        check("process set ranks",
              [](const proto::Request& r) { return Dims(r, 0); });
        break;
      default:
        break;
    }
  }
  if (!problems.empty()) return failed();
  response.set_kind(proto::Response::EXECUTE);
  response.set_op(first->op());
  response.set_dtype(first->dtype());
  response.set_device(first->device());
  response.set_device_kind(first->device_kind());
  response.set_reduce_op(first->reduce_op());
  *response.mutable_shape() = first->shape();
  response.set_root_rank(first->root_rank());
  response.set_prescale(first->prescale());
  response.set_postscale(first->postscale());
  response.set_compression(first->compression());
  response.set_group(first->group());
  if (first->op() == proto::ALLGATHER) {
    int64_t total_first = 0;
    for (const proto::Request* r : requests) {
      const int64_t d = r == nullptr ? 0 : r->shape(0);
      response.add_tensor_sizes(d);
      total_first += d;
    }
    response.set_shape(0, total_first);
  }
  if (first->op() == proto::ALLTOALL) {
    // A joined rank (no request; the coordinator fails such an alltoall
    // before) would send and receive nothing.
    for (const proto::Request* r : requests) {
      for (size_t j = 0; j < requests.size(); ++j) {
        response.add_tensor_sizes(r != nullptr &&
                                          static_cast<int>(j) < r->splits_size()
                                      ? r->splits(static_cast<int>(j))
                                      : 0);
      }
    }
  }
  return response;
}

}  // namespace terse
