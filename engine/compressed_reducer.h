// CompressedReducer: the BucketReducer that compresses (DESIGN §2 steps 5-8).
//
// Per bucket and step:
//   decision = policy.Decide()            (static, GraVAC or Accordion)
//   a = fused gradient + residual         (per tensor,
//   compressors/residual_store) compress a as the decision says      (GraVAC:
//   two levels, theta_min then
//                                          the candidate, both probed)
//   residual = a - what this rank sent   (dropped on a dense send)
// With TERSE_MOMENTUM_CORRECTION = m > 0 the gradient is first replaced by
// its velocity u = m*u + g and sparsifiers' sent entries are cleared from u
// and from the residual (engine/momentum_correction.h); buckets that go
// dense still get the velocity.
//   communicate: dense -> allreduce; summable payloads -> allreduce of their
//     body; others -> allgatherv, every rank decoding every rank's payload in
//     rank order (so every rank ends with bitwise-identical sums); PowerSGD
//     -> its allreduce rounds
//   policy.Observe(previous decision, statistics averaged over ranks)
// Statistics ride on the step's own allgather (a trailer behind each
// payload); on allreduce paths they take one tiny allgather, and only for the
// adaptive policies. Observe lags one step because a step's time is known
// only once the step is over; the time measured is the bucket's compress +
// communicate + decompress time plus its share (by bytes) of the rest of the
// step.
//
// Buckets that are not fp32 CPU Sum buckets, that are smaller than
// TERSE_MIN_COMPRESS_BYTES, or whose tensors' policy is "none" go dense
// through DenseAllreduceReducer. A payload from a peer that fails to decode
// is an InvalidArgument error naming the rank and the bucket, on every rank.
//
// Reduce and Forget run on the engine's background thread; Reports,
// bytes_sent, OnLearningRateDrop, SaveState and LoadState may be called from
// any thread. Locking: no lock is held across a collective. A step (one
// Reduce) marks itself in flight under mu_ (idle_ = false) and from then on
// the background thread alone touches the bucket states, the residuals'
// entries it updates and the velocities, without a lock; at the end of the
// step it publishes the bucket's report and the byte count under report_mu_
// (a small lock readers take: Reports and bytes_sent never wait for the
// network) and sets idle_ under mu_. OnLearningRateDrop applies the drop at
// once when no step is in flight, else the step in flight applies it before
// it ends. SaveState and LoadState take mu_ only while idle_ (a condition):
// they wait at most for the step in flight and so see, or replace, every
// bucket at a step boundary, never half a step.
#ifndef TERSE_ENGINE_COMPRESSED_REDUCER_H_
#define TERSE_ENGINE_COMPRESSED_REDUCER_H_

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/config.h"
#include "compressors/compressor.h"
#include "compressors/registry.h"
#include "compressors/residual_store.h"
#include "engine/bucket_reducer.h"
#include "engine/checkpoint_format.h"
#include "engine/checkpoint_io.h"
#include "engine/compression_state.pb.h"
#include "engine/external_compression_state.h"
#include "engine/momentum_correction.h"
#include "gravac/policy.h"

namespace terse {

// What a bucket did on its last step, for progress prints and bindings.
struct BucketReport {
  int bucket = 0;
  int tensors = 0;
  int64_t bytes = 0;       // Dense bytes of the bucket.
  std::string policy;      // Describe() of its policy, or "none".
  std::string compressor;  // What it sent last step ("none": dense).
  double cf = 1;           // Compression factor sent last step.
  int64_t bytes_sent = 0;  // Bytes this rank sent for it last step.
  int64_t steps = 0;
  int32_t process_set = 0;  // Its set's id (Engine::BucketReports fills it).
};

class CompressedReducer : public BucketReducer {
 public:
  CompressedReducer(const Config& config, int rank, int size);
  ~CompressedReducer() override;

  absl::Status Reduce(const BucketReduceContext& ctx) override;
  // fp16/bf16 under a static policy (compressed_reducer_cast.cc).
  DataType CastWireType(const BucketReduceContext& ctx) override;
  void CastReduced(const BucketReduceContext& ctx, DataType wire,
                   Clock::time_point start, Clock::time_point end,
                   const absl::Status& status) override;
  // Buckets this reducer sends dense with nothing else to do (not
  // compressed, no momentum correction): the executor may pipeline them.
  bool ReducesPlainDense(const BucketReduceContext& ctx) override;
  void DenseReduced(const BucketReduceContext& ctx, Clock::time_point start,
                    Clock::time_point end) override;
  void Forget(int bucket_id) override;
  // Drops the residuals and velocities of `names` (between steps).
  void ForgetTensors(const std::vector<std::string>& names) override;

  std::vector<BucketReport> Reports() const;
  // Bytes this rank has sent through this reducer since it was made.
  int64_t bytes_sent() const;
  // This rank's residual of tensor `name` (count elements; zeros if none).
  std::vector<float> Residual(const std::string& name, int64_t count) const {
    return residuals_.Residual(name, 0, count);
  }
  // Forwards a learning-rate drop to every bucket's policy (Accordion).
  void OnLearningRateDrop();

  // Hooks for compression that runs outside this reducer (device buckets,
  // engine/device_compression.h). `external` (not owned; null to detach)
  // joins checkpoints and ForgetTensors; set it between steps.
  void set_external_state(ExternalCompressionState* external);
  // Runs `step` as one step of this reducer (SaveState and LoadState wait
  // for it) and publishes the report it returns.
  absl::Status RunExternalStep(
      const std::function<absl::StatusOr<BucketReport>()>& step);
  // Removes and returns the residual of tensor `name` (tensor offset 0,
  // `count` elements) from this reducer's store; nullopt when it has none.
  // For a caller that moves a restored residual elsewhere.
  std::optional<std::vector<float>> TakeResidual(const std::string& name,
                                                 int64_t count);
  // The same for the momentum-correction velocity of tensor `name`.
  std::optional<std::vector<float>> TakeVelocity(const std::string& name,
                                                 int64_t count);
  // Removes and returns the restored state of the bucket with key `key`
  // (members' names joined by ','), warm-state values included; nullopt
  // when a load restored none. Only inside RunExternalStep's step.
  std::optional<proto::BucketCompressionState> TakeRestoredBucket(
      const std::string& key);

  // Checkpoints in the chunked format (engine/checkpoint_format.h): bucket
  // policy states in its header, residuals, velocities and Accordion's
  // accumulators as raw chunks, so a state of any size fits. Loads also
  // read the older format, a serialised proto::CompressionState (detected
  // by the absence of the magic prefix).
  //
  // LoadState replaces the residuals and velocities and keeps the bucket
  // states until buckets with the same members appear. A load validates
  // everything (checksums, lengths) into temporaries first and swaps them in
  // under the lock: a failed load leaves the previous state untouched, and
  // its error names the damaged tensor/chunk or the truncation.
  //
  // Saves hold the state's lock while they write (Reduce waits): the file
  // variant streams the tensors chunk by chunk to `path`.tmp without a
  // second in-memory copy, then renames it to `path`; on failure `path` is
  // untouched and the temporary file removed.
  absl::StatusOr<std::string> SaveState() const;
  absl::Status LoadState(absl::string_view bytes);
  absl::Status SaveStateToFile(const std::string& path) const;
  absl::Status LoadStateFromFile(const std::string& path);
  // Chunk size of later saves (checkpoint::kDefaultChunkBytes unless set;
  // a multiple of 4 in [4, checkpoint::kMaxChunkBytes], else saves fail).
  void set_checkpoint_chunk_bytes(int64_t bytes);

 private:
  struct BucketState;
  struct Sent;
  // Whether the bucket of `ctx` is sent compressed; `choice`: its policy.
  bool Compressible(const BucketReduceContext& ctx,
                    CompressionChoice* choice) const;
  // Everything a load replaces, validated before it is installed.
  struct LoadedState {
    std::vector<ResidualStore::Entry> residuals;
    std::vector<ResidualStore::Entry> velocities;
    std::map<std::string, proto::BucketCompressionState> restored;
    int64_t bytes_sent = 0;
  };

  // Writes the state to `sink` in the chunked format, holding the lock.
  absl::Status WriteState(checkpoint::ByteSink* sink) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // The bucket states (policy, pending decision) into `meta`, and views of
  // their accumulators into `tensors`.
  void SaveBuckets(proto::CheckpointHeader* meta,
                   std::vector<checkpoint::TensorToWrite>* tensors) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A whole checkpoint, validated, in temporaries.
  static absl::StatusOr<LoadedState> ParseChunked(
      checkpoint::ByteSource* source);
  static absl::StatusOr<LoadedState> ParseLegacy(absl::string_view bytes);
  // Replaces the state by a validated one.
  void InstallState(LoadedState loaded) ABSL_LOCKS_EXCLUDED(mu_);

  // The private methods below that take a BucketState run on the background
  // thread inside a step (idle_ false; see the header comment), without mu_.
  BucketState& StateFor(const Bucket& bucket, const std::string& policy,
                        double cf);
  // The bucket's compressor `name` at cf (and PowerSGD rank `level` > 0);
  // `probe` instances only measure gains and keep their own state.
  absl::StatusOr<Compressor*> CompressorFor(BucketState& state,
                                            const std::string& name, double cf,
                                            int64_t level, bool probe);
  // ||C(a)||^2 of `choice` applied to the bucket's a, locally (a portfolio
  // gain probe: nothing is sent).
  absl::StatusOr<double> ProbeGain(BucketState& state,
                                   const gravac::Choice& choice,
                                   const CompressContext& cctx);
  // TERSE_MOMENTUM_CORRECTION on a bucket that goes dense without
  // compression: replaces its gradients by their velocities in ctx.data.
  absl::Status ApplyMomentumBeforeDense(const BucketReduceContext& ctx)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status ReduceCompressed(const BucketReduceContext& ctx,
                                BucketState& state);
  // Compresses a as `decision` says; fills `sent` and the local norms.
  absl::Status Compress(const BucketReduceContext& ctx, BucketState& state,
                        const gravac::Decision& decision,
                        const CompressContext& cctx, Sent* sent);
  // Window gain: adds this step's g and g - local to the bucket's window
  // sums and writes their norms into `stats`.
  void AddToWindowGain(BucketState& state, const std::vector<float>& local,
                       std::vector<double>* stats);
  // Moves the bytes and leaves the sum over ranks in ctx.data; `stats` holds
  // this rank's statistics on entry and their sum over ranks on return.
  absl::Status Communicate(const BucketReduceContext& ctx, BucketState& state,
                           Sent* sent, std::vector<double>* stats);
  // The time of the bucket's previous step (see the header comment).
  double PreviousStepSeconds(BucketState& state, Clock::time_point now);
  // Start and end of a step (see the header comment); EndStep applies
  // learning-rate drops that came during the step.
  void BeginStep() ABSL_LOCKS_EXCLUDED(mu_);
  void EndStep() ABSL_LOCKS_EXCLUDED(mu_);
  // Adds report.bytes_sent to the count and publishes the bucket's report
  // (its steps counted here) for readers.
  void Publish(BucketReport report) ABSL_LOCKS_EXCLUDED(report_mu_);

  const Config config_;
  const int rank_;
  const int size_;
  DenseAllreduceReducer dense_;
  ResidualStore residuals_;

  // mu_ guards the members below while idle_; while a step is in flight the
  // background thread owns them (no annotation can say so).
  mutable absl::Mutex mu_;
  bool idle_ ABSL_GUARDED_BY(mu_) = true;  // No step in flight.
  int lr_drops_pending_ ABSL_GUARDED_BY(mu_) = 0;
  MomentumCorrection momenta_;
  std::map<int, std::unique_ptr<BucketState>> buckets_;
  // Restored bucket states waiting for their bucket, by key.
  std::map<std::string, proto::BucketCompressionState> restored_;
  int64_t bytes_sent_ = 0;  // Checkpointed; published as bytes_published_.
  int64_t checkpoint_chunk_bytes_ ABSL_GUARDED_BY(mu_);
  ExternalCompressionState* external_ ABSL_GUARDED_BY(mu_) = nullptr;
  // Running totals of every bucket's own time and bytes (for the share of
  // the rest of the step); background thread only.
  double own_seconds_total_ = 0;
  double own_bytes_total_ = 0;

  // What readers see, published at the end of each step.
  mutable absl::Mutex report_mu_ ABSL_ACQUIRED_AFTER(mu_);
  std::map<int, BucketReport> reports_ ABSL_GUARDED_BY(report_mu_);
  int64_t bytes_published_ ABSL_GUARDED_BY(report_mu_) = 0;
};

}  // namespace terse

#endif  // TERSE_ENGINE_COMPRESSED_REDUCER_H_
