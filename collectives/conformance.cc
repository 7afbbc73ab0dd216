#include "collectives/conformance.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <type_traits>

#include "absl/algorithm/container.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/half.h"

namespace terse {
namespace {

uint64_t Mix(uint64_t x) {  // splitmix64 finaliser.
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t Hash(uint64_t salt, int rank, int64_t i) {
  return Mix(Mix(salt * 1000003u + static_cast<uint64_t>(rank)) ^
             static_cast<uint64_t>(i));
}

class HostMemory : public ConformanceMemory {
 public:
  void* Allocate(int64_t bytes) override { return ::operator new(bytes); }
  void Free(void* buffer) override { ::operator delete(buffer); }
  absl::Status CopyFromHost(void* dst, const void* host,
                            int64_t bytes) override {
    std::memcpy(dst, host, bytes);
    return absl::OkStatus();
  }
  absl::Status CopyToHost(void* host, const void* src, int64_t bytes) override {
    std::memcpy(host, src, bytes);
    return absl::OkStatus();
  }
};

// The suite's state for one rank: communicator, memory and failure list.
class Suite {
 public:
  Suite(Communicator& comm, const ConformanceOptions& options,
        ConformanceMemory* memory)
      : comm_(comm), options_(options), memory_(memory) {}

  std::vector<std::string> Run();

 private:
  // A buffer in the suite's memory holding a copy of `host` (null for 0
  // bytes, which every operation must accept).
  class Buffer {
   public:
    Buffer(Suite* suite, const std::vector<uint8_t>& host) : suite_(suite) {
      bytes_ = static_cast<int64_t>(host.size());
      if (bytes_ == 0) return;
      data_ = suite_->memory_->Allocate(bytes_);
      if (data_ == nullptr) {
        suite_->Fail("allocate", absl::StrCat(bytes_, " bytes failed"));
        return;
      }
      absl::Status s =
          suite_->memory_->CopyFromHost(data_, host.data(), bytes_);
      if (!s.ok()) suite_->Fail("copy to buffer", s.ToString());
    }
    ~Buffer() {
      if (data_ != nullptr) suite_->memory_->Free(data_);
    }
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;

    void* data() const { return data_; }
    std::vector<uint8_t> Read() const {
      std::vector<uint8_t> host(bytes_);
      if (bytes_ == 0 || data_ == nullptr) return host;
      absl::Status s = suite_->comm_.Synchronize();
      if (s.ok()) s = suite_->memory_->CopyToHost(host.data(), data_, bytes_);
      if (!s.ok()) suite_->Fail("copy from buffer", s.ToString());
      return host;
    }

   private:
    Suite* suite_;
    void* data_ = nullptr;
    int64_t bytes_ = 0;
  };

  void Fail(absl::string_view what, absl::string_view detail) {
    failures_.push_back(
        absl::StrCat("rank ", comm_.rank(), ": ", what, ": ", detail));
  }
  // Records a failure unless `s` is OK; returns s.ok().
  bool ExpectOk(const absl::Status& s, absl::string_view what) {
    if (!s.ok()) Fail(what, s.ToString());
    return s.ok();
  }
  bool Unreduced(DataType dtype) const {
    return absl::c_linear_search(options_.unreduced_dtypes, dtype);
  }
  void ExpectInvalid(const absl::Status& s, absl::string_view what) {
    if (s.code() != absl::StatusCode::kInvalidArgument) {
      Fail(what, absl::StrCat("want InvalidArgument, got ", s.ToString()));
    } else if (s.message().empty()) {
      Fail(what, "InvalidArgument without a message");
    }
  }

  std::vector<uint8_t> Input(DataType dtype, ReduceOp op, int rank,
                             int64_t count) const;
  void CheckAllreduce(DataType dtype, ReduceOp op, int64_t count);
  void CheckAllreduceStaged(DataType dtype, ReduceOp op, int64_t count);
  void CompareReduced(DataType dtype, ReduceOp op, const std::string& what,
                      const std::vector<std::vector<uint8_t>>& inputs,
                      const std::vector<uint8_t>& got, int64_t count);
  void CompareHalf(DataType dtype, ReduceOp op, const std::string& what,
                   const std::vector<std::vector<uint8_t>>& inputs,
                   const std::vector<uint8_t>& got, int64_t count);
  void CheckAllgather(int64_t bytes);
  void CheckAllgatherv(const std::vector<int64_t>& sizes,
                       const std::string& pattern);
  void CheckBroadcast(int root, int64_t bytes);
  void CheckBitwise(int64_t count, bool is_and, bool ready_bits);
  void CheckBadInputs();

  std::vector<uint8_t> Bytes(int rank, int64_t n, uint64_t salt) const {
    std::vector<uint8_t> v(n);
    for (int64_t i = 0; i < n; ++i) v[i] = Hash(salt, rank, i) & 0xff;
    return v;
  }

  Communicator& comm_;
  const ConformanceOptions& options_;
  ConformanceMemory* memory_;
  std::vector<std::string> failures_;
};

template <typename T>
void Put(std::vector<uint8_t>* v, int64_t i, T value) {
  std::memcpy(v->data() + i * sizeof(T), &value, sizeof(T));
}
template <typename T>
T Get(const std::vector<uint8_t>& v, int64_t i) {
  T value;
  std::memcpy(&value, v.data() + i * sizeof(T), sizeof(T));
  return value;
}

bool IsHalf(DataType dtype) {
  return dtype == DataType::kFloat16 || dtype == DataType::kBFloat16;
}

double HalfValue(DataType dtype, uint16_t bits) {
  return dtype == DataType::kFloat16 ? HalfToFloat(bits)
                                     : BFloat16ToFloat(bits);
}

uint16_t HalfBits(DataType dtype, double x) {
  return dtype == DataType::kFloat16 ? FloatToHalf(static_cast<float>(x))
                                     : FloatToBFloat16(static_cast<float>(x));
}

// Half an ulp of |x| in the 16-bit format (x normal).
double HalfUlp(DataType dtype, double x) {
  const int precision = dtype == DataType::kFloat16 ? 11 : 8;
  int exponent = 0;
  std::frexp(std::fabs(x), &exponent);
  return std::ldexp(1.0, exponent - precision - 1);
}

std::vector<uint8_t> Suite::Input(DataType dtype, ReduceOp op, int rank,
                                  int64_t count) const {
  std::vector<uint8_t> v(count * DataTypeSize(dtype));
  const uint64_t salt =
      static_cast<uint64_t>(dtype) * 16 + static_cast<uint64_t>(op) + 1;
  const bool summing = op == ReduceOp::kSum || op == ReduceOp::kAverage;
  for (int64_t i = 0; i < count; ++i) {
    const uint64_t h = Hash(salt, rank, i);
    if (op == ReduceOp::kProduct && IsFloatingPoint(dtype)) {
      // +-2^e, e in [-2, 2]: every product of a few ranks is exact in any
      // order and type, so the reference compares bit for bit.
      double p =
          std::ldexp((h >> 8) & 1 ? -1.0 : 1.0, static_cast<int>(h % 5) - 2);
      if (dtype == DataType::kFloat32) {
        Put<float>(&v, i, static_cast<float>(p));
      } else if (dtype == DataType::kFloat64) {
        Put<double>(&v, i, p);
      } else {
        Put<uint16_t>(&v, i, HalfBits(dtype, p));
      }
      continue;
    }
    // Multiples of 1/8 in [-125, 125]: exact in f32 and in any sum order.
    const double eighths = (static_cast<int64_t>(h % 2001) - 1000) / 8.0;
    switch (dtype) {
      case DataType::kFloat32:
        Put<float>(&v, i, static_cast<float>(eighths));
        break;
      case DataType::kFloat64:
        Put<double>(&v, i, eighths);
        break;
      case DataType::kInt32:
        Put<int32_t>(&v, i, static_cast<int32_t>(h % 2000001) - 1000000);
        break;
      case DataType::kInt64:
        Put<int64_t>(
            &v, i,
            static_cast<int64_t>(h % (uint64_t{1} << 41)) - (int64_t{1} << 40));
        break;
      case DataType::kUInt8:
        Put<uint8_t>(&v, i, static_cast<uint8_t>(h));
        break;
      case DataType::kInt8:  // Any value: sums overflow and wrap.
        Put<int8_t>(&v, i, static_cast<int8_t>(static_cast<uint8_t>(h)));
        break;
      case DataType::kInt16:
        Put<int16_t>(&v, i, static_cast<int16_t>(static_cast<uint16_t>(h)));
        break;
      case DataType::kBool:
        Put<uint8_t>(&v, i, static_cast<uint8_t>(h & 1));
        break;
      case DataType::kFloat16: {
        // Full 10-bit mantissa, magnitude in [0.25, 8); a sign for min/max.
        uint16_t exponent = static_cast<uint16_t>(13 + (h >> 10) % 5);
        uint16_t bits = static_cast<uint16_t>((exponent << 10) | (h & 0x3ff));
        if (!summing && ((h >> 20) & 1)) bits |= 0x8000;
        Put<uint16_t>(&v, i, bits);
        break;
      }
      case DataType::kBFloat16: {
        uint16_t exponent = static_cast<uint16_t>(125 + (h >> 7) % 5);
        uint16_t bits = static_cast<uint16_t>((exponent << 7) | (h & 0x7f));
        if (!summing && ((h >> 20) & 1)) bits |= 0x8000;
        Put<uint16_t>(&v, i, bits);
        break;
      }
    }
  }
  return v;
}

// Reference reduction of one element in type T (exact for the inputs above).
template <typename T>
T ReduceRef(const std::vector<std::vector<uint8_t>>& inputs, int64_t i,
            ReduceOp op) {
  T acc = Get<T>(inputs[0], i);
  for (size_t r = 1; r < inputs.size(); ++r) {
    T x = Get<T>(inputs[r], i);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAverage:
        acc = static_cast<T>(acc + x);  // u8 wraps, like the backends.
        break;
      case ReduceOp::kMin:
        acc = std::min(acc, x);
        break;
      case ReduceOp::kMax:
        acc = std::max(acc, x);
        break;
      case ReduceOp::kProduct:
        if constexpr (std::is_integral_v<T>) {
          // Wraps modulo 2^bits: multiplied as unsigned 64-bit.
          acc = static_cast<T>(static_cast<uint64_t>(acc) *
                               static_cast<uint64_t>(x));
        } else {
          acc = static_cast<T>(acc * x);
        }
        break;
      case ReduceOp::kAdasum:
        // Not elementwise, and not among kOps: the Adasum tests check it
        // against their own fp64 reference.
        break;
    }
  }
  if (op == ReduceOp::kAverage) acc = acc / static_cast<T>(inputs.size());
  return acc;
}

template <typename T>
int64_t FirstMismatch(const std::vector<std::vector<uint8_t>>& inputs,
                      const std::vector<uint8_t>& got, int64_t count,
                      ReduceOp op, std::string* detail) {
  for (int64_t i = 0; i < count; ++i) {
    T want = ReduceRef<T>(inputs, i, op);
    T have = Get<T>(got, i);
    if (std::memcmp(&want, &have, sizeof(T)) != 0) {
      *detail = absl::StrCat(
          "element ", i, ": got ",
          absl::StrFormat("%.17g", static_cast<double>(have)), " want ",
          absl::StrFormat("%.17g", static_cast<double>(want)));
      return i;
    }
  }
  return -1;
}

void Suite::CompareHalf(DataType dtype, ReduceOp op, const std::string& what,
                        const std::vector<std::vector<uint8_t>>& inputs,
                        const std::vector<uint8_t>& got, int64_t count) {
  const int n = static_cast<int>(inputs.size());
  const int partial = options_.half_partial_roundings;
  for (int64_t i = 0; i < count; ++i) {
    const uint16_t have_bits = Get<uint16_t>(got, i);
    const double have = HalfValue(dtype, have_bits);
    if (op == ReduceOp::kProduct) {  // Exact: powers of two.
      double want = 1.0;
      for (int r = 0; r < n; ++r)
        want *= HalfValue(dtype, Get<uint16_t>(inputs[r], i));
      if (have != want) {
        Fail(what, absl::StrCat("element ", i, ": got ", have, " want ", want));
        return;
      }
      continue;
    }
    if (op == ReduceOp::kMin || op == ReduceOp::kMax) {
      uint16_t want_bits = Get<uint16_t>(inputs[0], i);
      for (int r = 1; r < n; ++r) {
        uint16_t b = Get<uint16_t>(inputs[r], i);
        double x = HalfValue(dtype, b), w = HalfValue(dtype, want_bits);
        if (op == ReduceOp::kMin ? x < w : x > w) want_bits = b;
      }
      if (have_bits != want_bits) {
        Fail(what, absl::StrCat("element ", i, ": got ", have, " want ",
                                HalfValue(dtype, want_bits)));
        return;
      }
      continue;
    }
    double sum = 0;  // Exact: few 16-bit values fit in a double.
    for (int r = 0; r < n; ++r)
      sum += HalfValue(dtype, Get<uint16_t>(inputs[r], i));
    const double big = std::max(std::fabs(sum), std::fabs(have));
    double want = sum, bound;
    if (op == ReduceOp::kSum) {
      bound = (partial + 1) * HalfUlp(dtype, big);
    } else {
      want = sum / n;
      const double avg_big = std::max(std::fabs(want), std::fabs(have));
      bound = HalfUlp(dtype, avg_big) +
              (partial > 0 ? (partial + 1) * HalfUlp(dtype, big) / n : 0.0);
    }
    bound += 1e-6 * std::fabs(want);  // fp32 arithmetic inside the backends.
    if (!(std::fabs(have - want) <= bound)) {
      Fail(what, absl::StrCat("element ", i, ": got ", have, " want ", want,
                              " +- ", bound));
      return;
    }
  }
}

void Suite::CheckAllreduce(DataType dtype, ReduceOp op, int64_t count) {
  const int n = comm_.size();
  const std::string what = absl::StrCat("allreduce ", DataTypeName(dtype), " ",
                                        ReduceOpName(op), " count=", count);
  std::vector<std::vector<uint8_t>> inputs(n);
  for (int r = 0; r < n; ++r) inputs[r] = Input(dtype, op, r, count);
  Buffer buffer(this, inputs[comm_.rank()]);
  if (Unreduced(dtype)) {
    const absl::Status s = comm_.Allreduce(buffer.data(), count, dtype, op);
    if (s.code() != absl::StatusCode::kUnimplemented ||
        !absl::StrContains(s.message(), DataTypeName(dtype))) {
      Fail(what, absl::StrCat("want Unimplemented naming ", DataTypeName(dtype),
                              ", got ", s.ToString()));
    }
    return;
  }
  if (!ExpectOk(comm_.Allreduce(buffer.data(), count, dtype, op), what)) {
    return;
  }
  CompareReduced(dtype, op, what, inputs, buffer.Read(), count);
}

// AllreduceStaged with host memory: the buffer starts as poison, fill copies
// this rank's input in, drain copies the result out. Every element must be
// filled once before any drain of it and drained once; the drained copy
// must be the reduction (a range used before its fill, or drained before it
// was final, comes out wrong).
void Suite::CheckAllreduceStaged(DataType dtype, ReduceOp op, int64_t count) {
  const int n = comm_.size();
  const std::string what =
      absl::StrCat("allreduce staged ", DataTypeName(dtype), " ",
                   ReduceOpName(op), " count=", count);
  std::vector<std::vector<uint8_t>> inputs(n);
  for (int r = 0; r < n; ++r) inputs[r] = Input(dtype, op, r, count);
  const std::vector<uint8_t>& mine = inputs[comm_.rank()];
  const int64_t elem = static_cast<int64_t>(DataTypeSize(dtype));
  std::vector<uint8_t> buffer(mine.size(), 0xa5), out(mine.size(), 0x5a);
  std::vector<int> filled(count, 0), drained(count, 0);
  std::string order_error;
  auto fill = [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) ++filled[i];
    std::memcpy(buffer.data() + begin * elem, mine.data() + begin * elem,
                (end - begin) * elem);
  };
  auto drain = [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      if (filled[i] != 1 && order_error.empty()) {
        order_error = absl::StrCat("element ", i, " drained before its fill");
      }
      ++drained[i];
    }
    std::memcpy(out.data() + begin * elem, buffer.data() + begin * elem,
                (end - begin) * elem);
  };
  if (!ExpectOk(
          comm_.AllreduceStaged(buffer.data(), count, dtype, op, {fill, drain}),
          what)) {
    return;
  }
  if (!order_error.empty()) return Fail(what, order_error);
  for (int64_t i = 0; i < count; ++i) {
    if (filled[i] != 1 || drained[i] != 1) {
      return Fail(what, absl::StrCat("element ", i, " filled ", filled[i],
                                     "x and drained ", drained[i],
                                     "x; want once each"));
    }
  }
  CompareReduced(dtype, op, what, inputs, out, count);
}

void Suite::CompareReduced(DataType dtype, ReduceOp op, const std::string& what,
                           const std::vector<std::vector<uint8_t>>& inputs,
                           const std::vector<uint8_t>& got, int64_t count) {
  if (IsHalf(dtype)) return CompareHalf(dtype, op, what, inputs, got, count);
  std::string detail;
  int64_t bad = -1;
  switch (dtype) {
    case DataType::kFloat32:
      bad = FirstMismatch<float>(inputs, got, count, op, &detail);
      break;
    case DataType::kFloat64:
      bad = FirstMismatch<double>(inputs, got, count, op, &detail);
      break;
    case DataType::kInt32:
      bad = FirstMismatch<int32_t>(inputs, got, count, op, &detail);
      break;
    case DataType::kInt64:
      bad = FirstMismatch<int64_t>(inputs, got, count, op, &detail);
      break;
    case DataType::kUInt8:
      bad = FirstMismatch<uint8_t>(inputs, got, count, op, &detail);
      break;
    case DataType::kInt8:
      bad = FirstMismatch<int8_t>(inputs, got, count, op, &detail);
      break;
    case DataType::kInt16:
      bad = FirstMismatch<int16_t>(inputs, got, count, op, &detail);
      break;
    default:
      break;
  }
  if (bad >= 0) Fail(what, detail);
}

void Suite::CheckAllgather(int64_t bytes) {
  const int n = comm_.size();
  const std::string what = absl::StrCat("allgather bytes_per_rank=", bytes);
  Buffer send(this, Bytes(comm_.rank(), bytes, 7));
  Buffer recv(this, std::vector<uint8_t>(n * bytes, 0xee));
  if (!ExpectOk(comm_.Allgather(send.data(), recv.data(), bytes), what)) return;
  std::vector<uint8_t> got = recv.Read();
  for (int r = 0; r < n; ++r) {
    if (!std::equal(got.begin() + r * bytes, got.begin() + (r + 1) * bytes,
                    Bytes(r, bytes, 7).begin())) {
      return Fail(what, absl::StrCat("block of rank ", r, " differs"));
    }
  }
}

void Suite::CheckAllgatherv(const std::vector<int64_t>& sizes,
                            const std::string& pattern) {
  const int n = comm_.size();
  const int me = comm_.rank();
  const std::string what = absl::StrCat("allgatherv ", pattern);
  std::vector<uint8_t> want;
  for (int r = 0; r < n; ++r) {
    std::vector<uint8_t> part = Bytes(r, sizes[r], 11);
    want.insert(want.end(), part.begin(), part.end());
  }
  Buffer send(this, Bytes(me, sizes[me], 11));
  Buffer recv(this, std::vector<uint8_t>(want.size(), 0xee));
  if (!ExpectOk(comm_.Allgatherv(send.data(), recv.data(), sizes), what)) {
    return;
  }
  if (recv.Read() != want) Fail(what, "received data differs");
  // Sizes known to agree: the same result, whatever check it skips.
  Buffer agreed(this, std::vector<uint8_t>(want.size(), 0xee));
  if (!ExpectOk(comm_.AllgathervAgreedSizes(send.data(), agreed.data(), sizes),
                what + " (agreed sizes)")) {
    return;
  }
  if (agreed.Read() != want) {
    Fail(what + " (agreed sizes)", "received data differs");
  }
  if (options_.memory != nullptr) return;
  // Host memory, in place: this rank's part already at its offset.
  std::vector<uint8_t> in_place(want.size(), 0xee);
  int64_t offset = 0;
  for (int r = 0; r < me; ++r) offset += sizes[r];
  std::copy(want.begin() + offset, want.begin() + offset + sizes[me],
            in_place.begin() + offset);
  if (!ExpectOk(
          comm_.Allgatherv(in_place.data() + offset, in_place.data(), sizes),
          what + " (in place)")) {
    return;
  }
  if (in_place != want) Fail(what + " (in place)", "received data differs");
  // Host memory: the helper that gathers the sizes first.
  std::vector<uint8_t> got;
  std::vector<int64_t> got_sizes;
  std::vector<uint8_t> mine = Bytes(me, sizes[me], 11);
  if (!ExpectOk(comm_.AllgathervUnknownSizes(mine.data(), sizes[me], &got,
                                             &got_sizes),
                what + " (unknown sizes)")) {
    return;
  }
  if (got_sizes != sizes || got != want) {
    Fail(what + " (unknown sizes)", "received sizes or data differ");
  }
}

void Suite::CheckBroadcast(int root, int64_t bytes) {
  const std::string what =
      absl::StrCat("broadcast root=", root, " bytes=", bytes);
  std::vector<uint8_t> want = Bytes(root, bytes, 13);
  Buffer buffer(
      this, comm_.rank() == root ? want : std::vector<uint8_t>(bytes, 0xee));
  if (!ExpectOk(comm_.Broadcast(buffer.data(), bytes, root), what)) return;
  if (buffer.Read() != want) Fail(what, "received data differs");
}

void Suite::CheckBitwise(int64_t count, bool is_and, bool ready_bits) {
  const int n = comm_.size();
  const std::string what =
      absl::StrCat(is_and ? "bitwise_and" : "bitwise_or",
                   ready_bits ? " ready-bits" : "", " words=", count);
  auto word = [&](int r, int64_t i) -> uint64_t {
    if (!ready_bits) return Hash(17, r, i);
    // All set except one bit per rank (AND) / one bit per rank (OR).
    uint64_t bit = uint64_t{1} << ((r * 7 + i) % 64);
    return is_and ? ~bit : bit;
  };
  std::vector<uint8_t> host(count * 8);
  std::vector<uint64_t> want(count);
  for (int64_t i = 0; i < count; ++i) {
    uint64_t acc = word(0, i);
    for (int r = 1; r < n; ++r)
      acc = is_and ? acc & word(r, i) : acc | word(r, i);
    want[i] = acc;
    Put<uint64_t>(&host, i, word(comm_.rank(), i));
  }
  Buffer buffer(this, host);
  uint64_t* words = static_cast<uint64_t*>(buffer.data());
  absl::Status s =
      is_and ? comm_.BitwiseAnd(words, count) : comm_.BitwiseOr(words, count);
  if (!ExpectOk(s, what)) return;
  std::vector<uint8_t> got = buffer.Read();
  for (int64_t i = 0; i < count; ++i) {
    if (Get<uint64_t>(got, i) != want[i]) {
      return Fail(what, absl::StrCat("word ", i, " differs"));
    }
  }
}

void Suite::CheckBadInputs() {
  const int n = comm_.size();
  const int me = comm_.rank();
  Buffer four(this, std::vector<uint8_t>(64, 1));
  ExpectInvalid(comm_.Allreduce(nullptr, 5, DataType::kFloat32, ReduceOp::kSum),
                "allreduce with a null buffer");
  ExpectInvalid(
      comm_.Allreduce(four.data(), -1, DataType::kFloat32, ReduceOp::kSum),
      "allreduce with a negative count");
  for (DataType t : {DataType::kInt32, DataType::kInt64, DataType::kUInt8,
                     DataType::kInt8, DataType::kInt16}) {
    if (Unreduced(t)) continue;
    ExpectInvalid(comm_.Allreduce(four.data(), 4, t, ReduceOp::kAverage),
                  absl::StrCat("average on ", DataTypeName(t)));
  }
  ExpectInvalid(comm_.Allgather(nullptr, four.data(), 8),
                "allgather with a null send buffer");
  ExpectInvalid(comm_.Allgatherv(four.data(), four.data(),
                                 std::vector<int64_t>(n + 1, 1)),
                "allgatherv with size()+1 sizes");
  std::vector<int64_t> negative(n, 1);
  negative[n - 1] = -1;
  ExpectInvalid(comm_.Allgatherv(four.data(), four.data(), negative),
                "allgatherv with a negative size");
  ExpectInvalid(comm_.Broadcast(four.data(), 8, n), "broadcast root=size()");
  ExpectInvalid(comm_.Broadcast(four.data(), 8, -1), "broadcast root=-1");
  ExpectInvalid(comm_.BitwiseAnd(nullptr, 3), "bitwise_and with null words");
  if (n >= 2 && options_.detects_count_mismatch) {
    Buffer five(this, std::vector<uint8_t>(5 * 4, 0));
    ExpectInvalid(comm_.Allreduce(five.data(), me == 0 ? 4 : 5,
                                  DataType::kFloat32, ReduceOp::kSum),
                  "allreduce with counts differing across ranks");
  }
  if (n >= 2 && options_.detects_allgatherv_mismatch) {
    std::vector<int64_t> sizes(n, 4);
    if (me != 0) sizes[n - 1] = 5;  // Rank 0 disagrees with everyone else.
    Buffer recv(this, std::vector<uint8_t>(4 * n + 1, 0));
    ExpectInvalid(comm_.Allgatherv(four.data(), recv.data(), sizes),
                  "allgatherv with recv_bytes differing across ranks");
  }
  // The communicator still works after all that.
  CheckAllreduce(DataType::kFloat32, ReduceOp::kSum, 3);
}

std::vector<std::string> Suite::Run() {
  const DataType kTypes[] = {
      DataType::kFloat32,  DataType::kFloat64, DataType::kFloat16,
      DataType::kBFloat16, DataType::kInt32,   DataType::kInt64,
      DataType::kUInt8,    DataType::kInt8,    DataType::kInt16};
  const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin,
                           ReduceOp::kMax, ReduceOp::kProduct};
  const int n = comm_.size();
  for (int64_t count : options_.sizes) {
    for (DataType dtype : kTypes) {
      for (ReduceOp op : kOps) {
        if (op == ReduceOp::kAverage && !IsFloatingPoint(dtype)) continue;
        CheckAllreduce(dtype, op, count);
      }
    }
    // Staged through host callbacks: host memory only.
    if (options_.memory == nullptr) {
      for (DataType dtype :
           {DataType::kFloat32, DataType::kFloat16, DataType::kInt32}) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
          CheckAllreduceStaged(dtype, op, count);
        }
      }
      CheckAllreduceStaged(DataType::kFloat32, ReduceOp::kAverage, count);
    }
    CheckAllgather(count);
    // Uneven: zero on odd ranks, growing on even ones.
    std::vector<int64_t> uneven(n), last_only(n, 0);
    for (int r = 0; r < n; ++r) uneven[r] = r % 2 ? 0 : count + 3 * r;
    last_only[n - 1] = count;
    CheckAllgatherv(uneven, absl::StrCat("uneven base=", count));
    // Equal parts (MPI sends these through MPI_Allgather).
    CheckAllgatherv(std::vector<int64_t>(n, count + 1),
                    absl::StrCat("even bytes=", count + 1));
    CheckAllgatherv(last_only, absl::StrCat("last-rank-only bytes=", count));
    for (int root = 0; root < n; ++root) CheckBroadcast(root, count);
    for (bool is_and : {true, false}) {
      CheckBitwise(count, is_and, /*ready_bits=*/false);
      CheckBitwise(count, is_and, /*ready_bits=*/true);
    }
  }
  for (int i = 0; i < 3; ++i) ExpectOk(comm_.Barrier(), "barrier");
  if (options_.bad_inputs) CheckBadInputs();
  return failures_;
}

}  // namespace

std::vector<std::string> RunConformance(Communicator& comm,
                                        const ConformanceOptions& options) {
  HostMemory host;
  Suite suite(comm, options,
              options.memory != nullptr ? options.memory : &host);
  return suite.Run();
}

}  // namespace terse
