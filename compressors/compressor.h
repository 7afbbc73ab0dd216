// The Compressor interface (DESIGN §3-4).
//
// A Compressor turns one bucket (a flat float32 span of d elements) into
// what the engine sends, and turns what it receives back into a dense float
// buffer. It NEVER calls a communicator: it tells the engine, through its
// traits, how its output must travel, and the engine moves the bytes.
//
// Two protocols; num_rounds() says which one a compressor speaks.
//
// Protocol A, num_rounds() == 0 (a single payload):
//   1. Compress(input, ctx, &payload) on every rank.
//   2a. summable(): the engine allreduce-SUMS the region SummableBody(&payload)
//       names (elementwise, its dtype) in place on every rank. The rest of
//       the payload (header and parameters) is identical on every rank when
//       every rank compressed a bucket of the same size with the same
//       ctx.seed/step/stream, so it is not summed. Then AccumulateInto(
//       payload, dense) once adds the SUM over ranks into dense.
//   2b. otherwise: the engine allgathers the payloads (sizes differ unless
//       fixed_size()), and every rank calls AccumulateInto(payload_r, dense)
//       for every rank r (its own included), which adds the sum.
//   Averaging (dividing by the number of ranks) is the engine's business.
//
// Protocol B, num_rounds() == R > 0 (allreduce rounds; PowerSGD: R == 2):
//   state = BeginRounds(input, ctx)
//   for r in 0 .. R-1:
//     buf = state->RoundBuffer(r)          // float32, same size on all ranks
//     engine: allreduce-SUM buf in place   // every rank gets the same sum
//     state->EndRound(r)                   // may prepare RoundBuffer(r + 1)
//   state->AccumulateInto(dense)           // adds the sum over ranks
//   state->AccumulateLocal(dense)          // (error feedback) own share
//
// Payloads received from peers are untrusted: AccumulateInto validates the
// whole payload first and returns InvalidArgument without touching dense.
//
// Thread-safety: traits are immutable. Compress/AccumulateInto/BeginRounds
// may be called from several threads at once; compressors with state
// (PowerSGD's warm start, error feedback) guard it internally. A RoundState
// belongs to one caller and must not outlive its Compressor.
#ifndef TERSE_COMPRESSORS_COMPRESSOR_H_
#define TERSE_COMPRESSORS_COMPRESSOR_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/data_type.h"
#include "compressors/payload.h"

namespace terse {

// A piece of a bucket that belongs to one tensor: bucket elements
// [offset, offset + count) are tensor `name`'s elements
// [tensor_offset, tensor_offset + count). Error feedback keys its residuals
// by (name, tensor_offset, count), so a tensor keeps its residual whatever
// bucket it lands in.
struct Segment {
  std::string name;
  int64_t offset = 0;
  int64_t count = 0;
  int64_t tensor_offset = 0;
  // The whole tensor's shape (row-major; its product is the tensor's element
  // count). Empty: unknown (a flat buffer from the C API or a test).
  // Layer-wise compressors (PowerSGD) read a segment that covers a whole
  // tensor of 2+ dimensions as a shape[0] x prod(shape[1:]) matrix.
  std::vector<int64_t> shape;
};

// What the engine tells a compressor about one bucket and step. seed, step
// and stream must be equal on every rank for the same bucket (random-k and
// the PowerSGD start vectors depend on them).
struct CompressContext {
  uint64_t seed = 0;    // TERSE_SEED.
  uint64_t step = 0;    // Training step.
  uint64_t stream = 0;  // The bucket's identity (e.g. a hash of its names).
  int rank = 0;         // This rank (decorrelates QSGD's rounding noise).
  // State key of the bucket for stateful compressors (PowerSGD's warm start)
  // and the default error-feedback segment; empty means "bucket:<stream>".
  std::string key;
  // The bucket's tensors. Empty: the whole bucket is one segment named key.
  absl::Span<const Segment> segments;
};

// Where in a payload the summable elements are (Protocol A, summable()).
struct SummableRegion {
  uint8_t* data = nullptr;
  int64_t count = 0;
  DataType dtype = DataType::kFloat32;
};

// In-flight state of one Protocol-B compression (see the header comment).
class RoundState {
 public:
  virtual ~RoundState() = default;
  virtual int num_rounds() const = 0;
  // The buffer of round `round`, valid from the previous EndRound (or
  // BeginRounds for round 0) until EndRound(round); the engine overwrites it
  // with its sum over ranks.
  virtual absl::Span<float> RoundBuffer(int round) = 0;
  // Call once per round, in order, after the buffer holds the sum.
  virtual absl::Status EndRound(int round) = 0;
  // After the last EndRound: dense += the reconstruction of the sum over
  // ranks (AccumulateInto) or of this rank's own input (AccumulateLocal).
  // `dense` has the bucket's element count; FailedPrecondition before the
  // last round, InvalidArgument on a size mismatch.
  virtual absl::Status AccumulateInto(absl::Span<float> dense) const = 0;
  virtual absl::Status AccumulateLocal(absl::Span<float> dense) const = 0;
};

class Compressor {
 public:
  virtual ~Compressor() = default;

  virtual CompressorId id() const = 0;
  const char* name() const { return CompressorName(id()); }
  // Compression factor the compressor was made with (dense bytes / sent
  // value bytes; 100 keeps 1% of the entries). Some ignore it (fp16...).
  virtual double cf() const = 0;
  // Whether decode(compress(x)) may differ from x beyond a precision cast;
  // error feedback is on by default exactly for these.
  virtual bool lossy() const = 0;
  // Payloads (Protocol A) or round buffers (Protocol B) can be summed by an
  // allreduce.
  virtual bool summable() const = 0;
  // The payload size depends on d only, never on the data.
  virtual bool fixed_size() const = 0;
  // 0: Protocol A; R > 0: Protocol B with R allreduce rounds.
  virtual int num_rounds() const { return 0; }

  // --- Protocol A ---
  // Replaces *payload by the compressed input. Never fails on finite or
  // non-finite input; errors are for misuse (e.g. d >= 2^32 for sparse
  // compressors, Protocol B compressors).
  virtual absl::Status Compress(absl::Span<const float> input,
                                const CompressContext& ctx, Payload* payload);
  // Validates `payload` (untrusted) and adds its decoded values into dense
  // (which must have the payload's dense count). On error dense is
  // unchanged.
  virtual absl::Status AccumulateInto(absl::Span<const uint8_t> payload,
                                      absl::Span<float> dense) const;
  // dense = decoded payload (zero-filled first; zero on error).
  absl::Status Decompress(absl::Span<const uint8_t> payload,
                          absl::Span<float> dense) const;
  // The summable part of a payload this compressor produced (summable()
  // only; FailedPrecondition otherwise, InvalidArgument for a bad payload).
  virtual absl::StatusOr<SummableRegion> SummableBody(Payload* payload) const;
  // An upper bound of the payload size for a bucket of d floats (exact when
  // fixed_size()); 0 for Protocol B.
  virtual int64_t MaxPayloadBytes(int64_t d) const = 0;

  // --- Protocol B ---
  virtual absl::StatusOr<std::unique_ptr<RoundState>> BeginRounds(
      absl::Span<const float> input, const CompressContext& ctx);

  // --- Warm state, for checkpoints ---
  // State a compressor carries from one step to the next besides error
  // feedback (which the caller owns): PowerSGD's last Q per tensor, by an
  // opaque key. Default: none. Thread-safe where BeginRounds is.
  virtual std::map<std::string, std::vector<float>> ExportWarmState() const {
    return {};
  }
  // Adds restored entries (ExportWarmState of a compressor of the same
  // kind, rank and options). An entry whose size does not fit its tensor
  // when it is used is ignored then: that tensor starts cold, as on its
  // first step. Default: ignores everything.
  virtual void ImportWarmState(
      std::map<std::string, std::vector<float>> state) {}
};

// ceil(d / cf) clamped to [1, d] (0 when d == 0): the entries a sparsifier
// keeps at compression factor cf.
int64_t KeepCount(int64_t d, double cf);

// The state key of a context ("bucket:<stream>" when ctx.key is empty).
std::string StateKey(const CompressContext& ctx);

}  // namespace terse

#endif  // TERSE_COMPRESSORS_COMPRESSOR_H_
