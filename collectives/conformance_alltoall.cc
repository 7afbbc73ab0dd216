#include "collectives/conformance_alltoall.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/data_type.h"
#include "common/half.h"

namespace terse {
namespace {

class Suite {
 public:
  explicit Suite(Communicator& comm)
      : comm_(comm), rank_(comm.rank()), size_(comm.size()) {}

  std::vector<std::string> Run() {
    for (int64_t scale : {0, 1, 3, 1000}) CheckAlltoallv(scale);
    CheckAlltoallvMismatch();
    const DataType dtypes[] = {DataType::kFloat32, DataType::kFloat64,
                               DataType::kFloat16, DataType::kBFloat16,
                               DataType::kInt32,   DataType::kInt64,
                               DataType::kUInt8,   DataType::kInt8,
                               DataType::kInt16};
    const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kAverage,
                            ReduceOp::kMin, ReduceOp::kMax,
                            ReduceOp::kProduct};
    for (DataType dtype : dtypes) {
      for (ReduceOp op : ops) {
        if (op == ReduceOp::kAverage && !IsFloat(dtype)) continue;
        for (int64_t scale : {0, 1, 50, 2000}) {
          CheckReduceScatter(dtype, op, scale);
        }
      }
    }
    CheckReduceScatterErrors();
    return failures_;
  }

 private:
  static bool IsFloat(DataType d) {
    return d == DataType::kFloat32 || d == DataType::kFloat64 ||
           d == DataType::kFloat16 || d == DataType::kBFloat16;
  }

  void Fail(const std::string& what) {
    failures_.push_back(absl::StrCat("rank ", rank_, ": ", what));
  }

  // Bytes rank i sends rank j.
  static int64_t SendBytes(int i, int j, int64_t scale) {
    return ((i * 7 + j * 3 + 1) % 5) * scale;  // Zero for some pairs.
  }
  static uint8_t Byte(int i, int j, int64_t p) {
    return static_cast<uint8_t>(i * 31 + j * 17 + p * 5);
  }

  void CheckAlltoallv(int64_t scale) {
    std::vector<int64_t> send_bytes(size_), recv_bytes(size_);
    std::vector<uint8_t> send, want;
    for (int j = 0; j < size_; ++j) {
      send_bytes[j] = SendBytes(rank_, j, scale);
      for (int64_t p = 0; p < send_bytes[j]; ++p) {
        send.push_back(Byte(rank_, j, p));
      }
      recv_bytes[j] = SendBytes(j, rank_, scale);
      for (int64_t p = 0; p < recv_bytes[j]; ++p) {
        want.push_back(Byte(j, rank_, p));
      }
    }
    send.push_back(0);  // Never empty (a null buffer); not sent.
    std::vector<uint8_t> got(want.size() + 1, 0xEE);  // +1: never null.
    absl::Status s =
        comm_.Alltoallv(send.data(), send_bytes, got.data(), recv_bytes);
    const std::string what = absl::StrCat("alltoallv scale ", scale);
    if (!s.ok()) return Fail(absl::StrCat(what, ": ", s.ToString()));
    for (size_t p = 0; p < want.size(); ++p) {
      if (got[p] != want[p]) {
        return Fail(absl::StrCat(what, ": byte ", p, " is ", got[p],
                                 ", want ", want[p]));
      }
    }
    if (got[want.size()] != 0xEE) Fail(what + ": wrote past the end");
  }

  void CheckAlltoallvMismatch() {
    std::vector<int64_t> send_bytes(size_, 4), recv_bytes(size_, 4);
    if (rank_ == 0) recv_bytes[size_ - 1] = 5;  // Rank n-1 sends 4.
    std::vector<uint8_t> send(4 * size_, 1), recv(5 * size_, 0);
    absl::Status s =
        comm_.Alltoallv(send.data(), send_bytes, recv.data(), recv_bytes);
    if (s.code() != absl::StatusCode::kInvalidArgument ||
        s.message().find("expects 5") == std::string::npos) {
      Fail(absl::StrCat("alltoallv with disagreeing sizes returned ",
                        s.ToString()));
    }
  }

  // Element e (of the whole send buffer) of rank r: small integers.
  static double Input(int r, int64_t e, ReduceOp op) {
    if (op == ReduceOp::kProduct) return 1 + (r + e) % 2;
    return 1 + (r * 13 + e * 7) % 9;
  }

  static void Store(DataType d, void* p, int64_t i, double v) {
    switch (d) {
      case DataType::kFloat32: static_cast<float*>(p)[i] = v; break;
      case DataType::kFloat64: static_cast<double*>(p)[i] = v; break;
      case DataType::kFloat16:
        static_cast<uint16_t*>(p)[i] = FloatToHalf(static_cast<float>(v));
        break;
      case DataType::kBFloat16:
        static_cast<uint16_t*>(p)[i] = FloatToBFloat16(static_cast<float>(v));
        break;
      case DataType::kInt32: static_cast<int32_t*>(p)[i] = v; break;
      case DataType::kInt64: static_cast<int64_t*>(p)[i] = v; break;
      case DataType::kUInt8: static_cast<uint8_t*>(p)[i] = v; break;
      case DataType::kInt8: static_cast<int8_t*>(p)[i] = v; break;
      case DataType::kInt16: static_cast<int16_t*>(p)[i] = v; break;
      default: break;
    }
  }

  static double Load(DataType d, const void* p, int64_t i) {
    switch (d) {
      case DataType::kFloat32: return static_cast<const float*>(p)[i];
      case DataType::kFloat64: return static_cast<const double*>(p)[i];
      case DataType::kFloat16:
        return HalfToFloat(static_cast<const uint16_t*>(p)[i]);
      case DataType::kBFloat16:
        return BFloat16ToFloat(static_cast<const uint16_t*>(p)[i]);
      case DataType::kInt32: return static_cast<const int32_t*>(p)[i];
      case DataType::kInt64: return static_cast<const int64_t*>(p)[i];
      case DataType::kUInt8: return static_cast<const uint8_t*>(p)[i];
      case DataType::kInt8: return static_cast<const int8_t*>(p)[i];
      case DataType::kInt16: return static_cast<const int16_t*>(p)[i];
      default: return NAN;
    }
  }

  std::vector<int64_t> Counts(int64_t scale) const {
    std::vector<int64_t> counts(size_);
    for (int i = 0; i < size_; ++i) counts[i] = ((i * 3 + 1) % 4) * scale;
    return counts;
  }

  void CheckReduceScatter(DataType dtype, ReduceOp op, int64_t scale) {
    const std::vector<int64_t> counts = Counts(scale);
    int64_t total = 0, offset = 0;
    for (int i = 0; i < size_; ++i) {
      if (i == rank_) offset = total;
      total += counts[i];
    }
    const size_t elem = DataTypeSize(dtype);
    std::vector<uint8_t> send((total + 1) * elem);
    std::vector<uint8_t> recv((counts[rank_] + 1) * elem);
    for (int64_t e = 0; e < total; ++e) {
      Store(dtype, send.data(), e, Input(rank_, e, op));
    }
    const std::string what =
        absl::StrCat("reduce-scatter ", DataTypeName(dtype), " ",
                     ReduceOpName(op), " scale ", scale);
    absl::Status s = comm_.ReduceScatter(send.data(), recv.data(), counts,
                                         dtype, op);
    if (!s.ok()) return Fail(absl::StrCat(what, ": ", s.ToString()));
    for (int64_t i = 0; i < counts[rank_]; ++i) {
      const int64_t e = offset + i;
      double want = Input(0, e, op);
      for (int r = 1; r < size_; ++r) {
        const double x = Input(r, e, op);
        switch (op) {
          case ReduceOp::kMin: want = std::min(want, x); break;
          case ReduceOp::kMax: want = std::max(want, x); break;
          case ReduceOp::kProduct: want *= x; break;
          default: want += x; break;
        }
      }
      double tolerance = 0;
      if (op == ReduceOp::kAverage) {
        want /= size_;
        tolerance = std::fabs(want) *
                    (dtype == DataType::kBFloat16   ? 1.0 / 128
                     : dtype == DataType::kFloat16  ? 1.0 / 1024
                     : dtype == DataType::kFloat32  ? 1e-6
                                                    : 1e-12);
      }
      const double got = Load(dtype, recv.data(), i);
      if (!(std::fabs(got - want) <= tolerance)) {
        return Fail(absl::StrCat(what, ": element ", i, " is ", got,
                                 ", want ", want));
      }
    }
  }

  void CheckReduceScatterErrors() {
    std::vector<int64_t> counts(size_, 2);
    std::vector<float> send(2 * size_ + 2, 1.0f), recv(4, 0.0f);
    absl::Status s = comm_.ReduceScatter(send.data(), recv.data(), counts,
                                         DataType::kFloat32,
                                         ReduceOp::kAdasum);
    if (s.code() != absl::StatusCode::kInvalidArgument) {
      Fail("reduce-scatter with Adasum returned " + s.ToString());
    }
    if (rank_ == 0) counts[0] = 3;  // Disagrees with every other rank.
    s = comm_.ReduceScatter(send.data(), recv.data(), counts,
                            DataType::kFloat32, ReduceOp::kSum);
    if (s.code() != absl::StatusCode::kInvalidArgument) {
      Fail("reduce-scatter with disagreeing counts returned " + s.ToString());
    }
  }

  Communicator& comm_;
  const int rank_;
  const int size_;
  std::vector<std::string> failures_;
};

}  // namespace

std::vector<std::string> RunAlltoallConformance(Communicator& comm) {
  return Suite(comm).Run();
}

}  // namespace terse
