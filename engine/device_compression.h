// DeviceCompression: compression of device buckets on the device, in stream
// order (the engine's path for CUDA and simulated-device tensors whose
// compression this class handles; engine/device_executor.h calls it).
//
// Handles static compression policies with the compressors fp16, bf16 (cast on
// the device, the 16-bit body summed over ranks by the device communicator or
// host staging, cast back), powersgd (DevicePowerSgd, engine/device_powersgd.h:
// products, orthonormalisation and warm starts on the device, its rounds
// through the device collective, residual a - own share on the device), randomk
// (the shared-seed positions drawn on the host, gathered on the device, the
// values summed by the device collective), efsignsgd (per-block scales and sign
// bits encoded on the device, every rank's payload decoded on the device in
// rank order), qsgd (the same with per-bucket norms and stochastically rounded
// codes, the CPU compressor's seeds) and the sparsifiers topk, dgc, redsync and
// threshold (error feedback: a = g + residual on the device; selection as the
// CPU sparsifier selects, gather and the residual update a - sent on the
// device). Gathered messages are byte for byte the CPU path's wire format (the
// compressors/payload.h payload plus the reducer's statistics trailer). Over
// the device communicator the sparse ones are built, gathered, validated
// (indices on the device, headers on the host) and decoded on the device, and
// only DGC's / RedSync's / threshold's counts and the 40-byte headers reach the
// host; efsignsgd's and qsgd's likewise (built on the device, qsgd's codes
// checked there; only each rank's 48-byte header and parameters, and the
// trailer where a policy reads it, reach the host). Staged, the entries or
// bodies come to the host, which builds, allgathers over the control
// communicator and validates them, and they are uploaded and decoded in rank
// order on the device. Results equal the CompressedReducer's on the same
// inputs bit for bit on the simulated device.
//
// Residuals live in device allocations of the bucket's DeviceRuntime, one
// per tensor (keyed by name, as ResidualStore keys them). They join the
// reducer's checkpoints through ExternalCompressionState (downloaded when a
// checkpoint is written), with the buckets' policy states and PowerSGD's
// warm starts in the reducer's format; after a load, and for a tensor or
// bucket seen for the first time, a step takes the tensor's residual and
// the bucket's state from the reducer (TakeResidual, TakeRestoredBucket),
// so state saved on one device kind loads on another.
//
// The adaptive policies HandlesPolicy accepts (gravac with one topk, dgc,
// redsync or randomk family; gravac's portfolio of dense, fp16, bf16,
// powersgd, topk, dgc, redsync, randomk and qsgd candidates; accordion with
// topk, dgc, redsync, randomk or powersgd) run the CompressedReducer's protocol
// here too (PolicyStep): probes, the portfolio's gain probes and window
// gains (their sums on the device, only their count sketches reach the
// host: DeviceOps::CountSketch), norms (reduced on the device; only the
// scalars reach the host policy), statistics exchange, one step of lag;
// the decisions and results equal the CPU path's bit for bit on the
// simulated device when the policy's decisions do not depend on measured
// time (the throughput guard off; the portfolio while it explores).
//
// TERSE_MOMENTUM_CORRECTION runs here too (velocities in device memory,
// in checkpoints through ExportVelocities / TakeVelocity), for every bucket
// Reduce is given, compressed or not.
//
// Not handled here (DeviceExecutor runs them through the CompressedReducer
// on a host copy of the bucket, with a warning): a policy HandlesPolicy
// refuses. No configuration Config accepts is one at present (a portfolio
// whose randomk candidates carried 16-bit values would be, but no setting
// selects them).
//
// Threading: Reduce and Forget run on the engine's background thread (the
// only one enqueuing on the engine streams); the ExternalCompressionState
// hooks may come from other threads (see that header) and take mu_.
#ifndef TERSE_ENGINE_DEVICE_COMPRESSION_H_
#define TERSE_ENGINE_DEVICE_COMPRESSION_H_

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "collectives/communicator.h"
#include "common/config.h"
#include "compressors/device/device_ops.h"
#include "compressors/payload.h"
#include "compressors/registry.h"
#include "device/runtime.h"
#include "engine/bucket_assigner.h"
#include "engine/compressed_reducer.h"
#include "engine/device_powersgd.h"
#include "engine/external_compression_state.h"

namespace terse {

class DeviceCompression : public ExternalCompressionState {
 public:
  // Sums `count` elements of `dtype` at device memory `data` over ranks, in
  // stream order (DeviceExecutor's collective: the device communicator or
  // host staging).
  using DeviceAllreduce =
      std::function<absl::Status(void* data, int64_t count, DataType dtype)>;
  // Gathers device memory over the device communicator, in stream order:
  // every rank's `recv_bytes[r]` bytes from its `send`, back to back in
  // `recv` (DeviceExecutor's collective over NCCL, or the simulated
  // device's communicator).
  using DeviceAllgatherv = std::function<absl::Status(
      const void* send, void* recv, const std::vector<int64_t>& recv_bytes)>;
  // Where a bucket's work runs: the engine stream of its device.
  struct Target {
    DeviceRuntime* runtime = nullptr;
    int ordinal = 0;
    Stream* stream = nullptr;  // Outlives this object's use of it.
  };

  // `reducer` (not owned) must outlive this object; this object attaches
  // itself (set_external_state) and detaches in its destructor.
  DeviceCompression(const Config& config, int rank, int size,
                    CompressedReducer* reducer);
  // The streams of every Target used must still exist (the executor
  // destroys this object before its streams); waits for their work.
  ~DeviceCompression() override;
  DeviceCompression(const DeviceCompression&) = delete;
  DeviceCompression& operator=(const DeviceCompression&) = delete;

  // Whether buckets whose tensors have compression `choice` go through
  // Reduce: a static policy of any compressor (fp16, bf16, topk, dgc,
  // redsync, threshold, powersgd, randomk, efsignsgd, qsgd), or an adaptive
  // policy HandlesPolicy accepts.
  static bool Handles(const CompressionChoice& choice, const Config& config);
  // The adaptive policies run on the device (PolicyStep): gravac with one
  // sparsifier family (TERSE_GRAVAC_CANDIDATES "paper" with
  // TERSE_GRAVAC_COMPRESSOR, or a single family) of topk, dgc, redsync or
  // randomk, gravac's portfolio where PortfolioOnDevice, and accordion with
  // TERSE_ACCORDION_COMPRESSOR topk, dgc, redsync, randomk or powersgd.
  static bool HandlesPolicy(const CompressionChoice& choice,
                            const Config& config);

  // Collective (every rank, same buckets, same order). Reduces device
  // bucket `bucket` (fused region `data`, this rank's contribution, device
  // memory of `target`) in place to its sum over ranks with op `op`
  // (non-Sum ops, non-fp32 buckets and buckets under
  // TERSE_MIN_COMPRESS_BYTES go dense through `allreduce`), as the bucket's
  // `step`-th run. The work is enqueued on target.stream; the calling
  // thread blocks for the host parts (the payload exchange). Errors are
  // fatal for the engine; a peer payload that does not decode is
  // InvalidArgument naming the rank and the bucket.
  //
  // `allgatherv` (may be empty): static topk and dgc buckets with kU32
  // indices (the engine's coding) send their messages (the CPU
  // path's payload and statistics trailer, byte for byte) over it: built on
  // the device, gathered device to device, validated on the device
  // (CheckSparseIndices) and the host (headers, 40 bytes a rank), decoded
  // on the device; the entries never cross to the host. Efsignsgd and
  // qsgd buckets (qsgd under gravac's portfolio too) send theirs over it
  // too (ExchangeDenseOnDevice: only the headers and parameters, 48 bytes
  // a rank, and a policy's trailers reach the host; qsgd's codes are
  // checked on the device, CheckQsgdCodes). Empty (staged collectives,
  // TERSE_GPU_OPERATIONS=mpi) or another coding: they go through the host
  // and `control`.
  absl::Status Reduce(const Bucket& bucket, void* data, ReduceOp op,
                      int64_t step, const Target& target, Communicator* control,
                      const DeviceAllreduce& allreduce,
                      const DeviceAllgatherv& allgatherv = {});

  // The bucket was dropped or changed: free its buffers (after its stream's
  // pending work).
  void Forget(int bucket_id);

  // ExternalCompressionState.
  absl::StatusOr<std::vector<ResidualStore::Entry>> ExportResiduals() override;
  absl::StatusOr<std::vector<ResidualStore::Entry>> ExportVelocities() override;
  absl::StatusOr<std::vector<SavedBucket>> ExportBuckets() override;
  void OnStateLoaded() override;
  void ForgetTensors(const std::vector<std::string>& names) override;

 private:
  struct Residual {
    Target target;
    int64_t count = 0;
    DeviceBuffer buffer;
    bool valid = false;  // Holds a residual (else: none, as if zero).
  };
  struct BucketState;

  absl::Status Prepare(const Target& target) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<DeviceOps*> OpsFor(const Target& target)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<BucketState*> StateFor(const Bucket& bucket,
                                        const CompressionChoice& choice,
                                        const Target& target)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The residual of a tensor of `count` elements (created, with what the
  // reducer's store held for it, on first use).
  absl::StatusOr<Residual*> ResidualFor(const std::string& name, int64_t count,
                                        const Target& target)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // TERSE_MOMENTUM_CORRECTION (engine/momentum_correction.h) on the
  // device: the velocity of a tensor the correction Applies to (created,
  // with what the reducer's store held for it, on first use); u = m u + g
  // and g = u for each such segment of `segments` in `g`; and after a
  // sparsifier sent `local` (this rank's decoded contribution), the sent
  // entries cleared from the residuals and the velocities.
  absl::StatusOr<Residual*> VelocityFor(const std::string& name, int64_t count,
                                        const Target& target)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ApplyMomentum(DeviceOps* ops, const Target& target,
                             const std::vector<Segment>& segments, float* g)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status MaskSent(BucketState& s, const float* local)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<BucketReport> CastStep(BucketState& s, float* data,
                                        const DeviceAllreduce& allreduce)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<BucketReport> SparseStep(BucketState& s, float* data,
                                          int64_t step, Communicator* control,
                                          const DeviceAllgatherv& allgatherv)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Selects from `x` (device) as the CPU sparsifier `kind` does (topk,
  // dgc, redsync, threshold) at k into `indices` (device, room for
  // SelectRoom(kind, k)); returns how many (a host wait for all but topk).
  absl::StatusOr<int64_t> Select(BucketState& s, CompressorId kind,
                                 const float* x, int64_t k, int64_t step,
                                 uint32_t* indices)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static int64_t SelectRoom(CompressorId kind, int64_t k);
  // Every rank's sparse entries on the device after ExchangeSparseOnDevice:
  // rank r's counts[r] indices and (float) values.
  struct DeviceEntries {
    std::vector<const uint32_t*> indices;
    std::vector<const float*> values;
    std::vector<int64_t> counts;
  };
  // Sends this rank's `kept` entries of sparsifier `kind` (device:
  // `indices`, float `values`) as the CPU path's message over `allgatherv`
  // (sizes over `control` unless every rank's is fixed): the payload, then
  // the statistics trailer `stats` with each (slot, device double) of
  // `device_stats` copied in on the device and the payload's byte count in
  // its last slot. Validates every rank's message (InvalidArgument naming
  // the rank) and decodes its entries on the device; the trailers summed in
  // rank order go to *summed (when not null), the payload's bytes to *bytes.
  absl::StatusOr<DeviceEntries> ExchangeSparseOnDevice(
      BucketState& s, CompressorId kind, const uint32_t* indices,
      const float* values, int64_t kept, std::vector<double> stats,
      const std::vector<std::pair<int, const double*>>& device_stats,
      Communicator* control, const DeviceAllgatherv& allgatherv, int64_t* bytes,
      std::vector<double>* summed) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // QSGD (device_qsgd.cc). QsgdEncodeLevel: `x` (device) quantised at
  // `levels` with this rank's draws for `step` (the CPU compressor's
  // per-bucket seeds, uploaded once a step), the norms into `norms`, the
  // codes into `codes` (device buffers, grown as needed); `level` (device,
  // when not null) gets 0 + their decoding, this rank's contribution.
  absl::Status QsgdEncodeLevel(BucketState& s, const float* x, int levels,
                               int64_t step, DeviceBuffer* norms,
                               DeviceBuffer* codes, float* level)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Enqueues the copy of the encoding at `levels` in s.values (norms) and
  // s.sign_bits (codes) to the host (s.host_values, s.host_bits), which
  // ExchangeQsgd reads after the caller waited for the stream (staged
  // only: over the device communicator the encoding stays on the device).
  absl::Status QsgdCopyToHost(BucketState& s, int levels)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Rank r's payload body on the device (its norms, then its codes), and
  // its parameters.
  struct QsgdSlot {
    const uint8_t* body = nullptr;
    int64_t bucket = 1, buckets = 0;
    int levels = 1;
  };
  // Sends this rank's payload at `levels` (the CPU path's, of the encoding
  // in s.values and s.sign_bits) with `stats` as its trailer and validates
  // every rank's as the CPU decoder does (InvalidArgument naming the
  // bucket and the rank). With `allgatherv`: built on the device and
  // gathered over it (ExchangeDenseOnDevice; the codes checked on the
  // device, CheckQsgdCodes), the slots in s.messages. Without: built on the
  // host from the copies of QsgdCopyToHost, allgathered over `control`
  // (every rank's the same size), validated on the host, the bodies
  // uploaded to s.sign_received. The trailers summed in rank order go to
  // *summed (when not null), the payload's bytes to *payload_bytes.
  absl::StatusOr<std::vector<QsgdSlot>> ExchangeQsgd(
      BucketState& s, int levels, std::vector<double> stats,
      Communicator* control, const DeviceAllgatherv& allgatherv,
      int64_t* payload_bytes, std::vector<double>* summed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // dense (device) += the decoding of the payload in `slot`.
  absl::Status QsgdDecodeSlot(BucketState& s, const QsgdSlot& slot,
                              float* dense) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<BucketReport> QsgdStep(BucketState& s, float* data,
                                        int64_t step, Communicator* control,
                                        const DeviceAllgatherv& allgatherv)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The end of a step whose payloads were gathered (EF-signSGD, QSGD): the
  // residual is a minus this rank's decoded payload, a the sum of every
  // rank's, decoded in rank order by decode_into(rank, dense) (which adds).
  absl::StatusOr<BucketReport> FinishGathered(
      BucketState& s, float* a, const gravac::Decision& decision,
      int64_t payload_bytes, Communicator* control,
      const std::function<absl::Status(int rank, float* dense)>& decode_into)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // EF-signSGD's step: with `allgatherv`, EfSignSgdOnDevice; without
  // (staged), the payload built, allgathered over `control` and validated
  // on the host, the bodies uploaded and decoded on the device.
  absl::StatusOr<BucketReport> EfSignSgdStep(BucketState& s, float* data,
                                             Communicator* control,
                                             const DeviceAllgatherv& allgatherv)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A device check of one rank's gathered body (ExchangeDenseOnDevice):
  // run(rank, body, bad) enqueues on the bucket's stream a check of the
  // body (device) that writes 0 to `bad` (a device uint32) when it decodes
  // and nonzero when not; `failure` says what a nonzero flag means.
  struct DeviceBodyCheck {
    std::function<absl::Status(int rank, const uint8_t* body, uint32_t* bad)>
        run;
    std::string failure;
  };
  // Sends this rank's payload of a dense-coded compressor (EF-signSGD,
  // QSGD) as the CPU path's message over `allgatherv`
  // (device_dense_exchange.cc): `header` (ext_bytes 8) and the parameters
  // `ext` (8 bytes, little-endian) from the host, the body encoded on the
  // device by encode(body) (body: device memory of header.body_bytes
  // rounded up to whole 4-byte words, 8-byte aligned, zeroed), then the
  // statistics trailer `stats` (at least kStatsTrailer doubles, the
  // payload's byte count put in its last slot). Every rank's message has
  // the same size (the ranks share the options and the decision), so no
  // sizes are exchanged and `control` is not used but for its size.
  // Validates every rank's message: its header and parameters on the host
  // (they must be this rank's, the 48 bytes that come to the host), its
  // body on the device with `check` (when check.run is set).
  // InvalidArgument naming the bucket and the rank when one does not
  // decode. Returns every rank's body (device, in s.messages: valid until
  // the bucket's next exchange); the payload's bytes go to *bytes, the
  // trailers summed in rank order to *summed (when not null: only then do
  // they come to the host).
  absl::StatusOr<std::vector<const uint8_t*>> ExchangeDenseOnDevice(
      BucketState& s, const PayloadHeader& header, uint64_t ext,
      const std::function<absl::Status(uint8_t* body)>& encode,
      const DeviceBodyCheck& check, std::vector<double> stats,
      Communicator* control, const DeviceAllgatherv& allgatherv, int64_t* bytes,
      std::vector<double>* summed) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // EF-signSGD's step over the device communicator, blocks of `block`
  // elements: the scales and bits encoded into the message on the device,
  // exchanged by ExchangeDenseOnDevice, decoded on the device in rank
  // order (FinishGathered).
  absl::StatusOr<BucketReport> EfSignSgdOnDevice(
      BucketState& s, float* data, const gravac::Decision& decision,
      int64_t block, Communicator* control, const DeviceAllgatherv& allgatherv)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<BucketReport> RandomKStep(BucketState& s, float* data,
                                           int64_t step,
                                           const DeviceAllreduce& allreduce)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<BucketReport> PowerSgdStep(BucketState& s, float* data,
                                            int64_t step,
                                            const DeviceAllreduce& allreduce)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One step of a bucket under an adaptive policy (device_policy_step.cc):
  // the CompressedReducer's protocol (Decide; a = g + residual; gravac's
  // two probe levels; what the decision sends; the statistics averaged
  // over ranks, piggy-backed on the sparse payloads or allgathered over
  // `control`; Observe one step late), with every vector on the device
  // and only the norms (scalars) and the sent entries on the host.
  absl::StatusOr<BucketReport> PolicyStep(BucketState& s, float* data,
                                          int64_t step, Communicator* control,
                                          const DeviceAllreduce& allreduce,
                                          const DeviceAllgatherv& allgatherv)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Compresses `x` (device) with sparsifier `kind` (topk, dgc) at `cf` as
  // the CPU compressor does: `level` (device) gets its decoding; the
  // selection (indices, values before the wire's rounding) stays in slot
  // `which` of s.selected_*. With `payload` (not null) the entries come to
  // the host, which builds the wire payload and decodes it (slot `which` of
  // the level host copies); without, the values are rounded as the wire
  // would on the device and nothing but DGC's count crosses to the host.
  absl::Status SparseLevel(BucketState& s, CompressorId kind, const float* x,
                           double cf, int64_t step, int which, float* level,
                           Payload* payload) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Every rank's sparse payload of compressor `kind`, gathered as messages
  // (payload, then `trailer` doubles of statistics) in `gathered`/`sizes`:
  // validated and decoded on the host, their entries uploaded to
  // s.recv_indices / s.recv_values (rank r's at starts[r], counts[r]), the
  // trailers summed in rank order into *stats (when not null).
  struct GatheredSparse {
    std::vector<int64_t> starts, counts;
  };
  absl::StatusOr<GatheredSparse> DecodeGatheredSparse(
      BucketState& s, CompressorId kind, const std::vector<uint8_t>& gathered,
      const std::vector<int64_t>& sizes, int trailer, Communicator* control,
      std::vector<double>* stats) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The PowerSGD instance of a policy bucket for (cf, level).
  DevicePowerSgd* PowerSgdFor(BucketState& s, double cf, int64_t level)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // a = g + residual, per tensor, in place in `g` (device), the velocity
  // u = m u + g first under TERSE_MOMENTUM_CORRECTION.
  absl::Status FormA(BucketState& s, float* g)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // gravac's portfolio on the device (device_portfolio.cc), as the
  // CompressedReducer (compressed_reducer.cc, compressed_reducer_exchange.cc):
  //
  // Whether the portfolio of `config` (TERSE_GRAVAC_CANDIDATES across
  // families) runs here: every candidate is dense, fp16, bf16, PowerSGD,
  // QSGD or a topk / dgc / redsync / randomk level (randomk with float32
  // values).
  static bool PortfolioOnDevice(const Config& config);
  // The start of a policy step, on the gradient `g` (device) before
  // anything is added: the window gain's sums of g (a decision with
  // window_gain_steps), then FormA, then the window's e_0 = a - sum g on its
  // first step. Sets the step's window state (s.window_*).
  absl::Status BeginPolicyStep(BucketState& s, const gravac::Decision& decision,
                               float* g, bool in_place, int64_t step)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The reducer's AddToWindowGain: this rank's sent contribution `local`
  // (device) joins the window; on the step that closes it, the deviation
  // (e_T - e_0 from `a`, or the summed g - sent) and the sum of g go into
  // `stats` from slot s.window_sketch_at, whole or as their count sketches
  // (computed on the device; only they come to the host).
  absl::Status AddToWindowGain(BucketState& s, const float* a,
                               const float* local, std::vector<double>* stats)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ||C(a)||^2 of each of the decision's gain probes, compressed locally on
  // the device as the reducer's ProbeGain (sparsifiers decoded as the wire
  // rounds them, fp16 / bf16 cast and back, PowerSGD on a rank alone with
  // the probe's own warm starts, QSGD quantised with the step's draws and
  // decoded), into stats[kStatsTrailer + i]. The probes run in stream
  // order; the host waits once, for the norms.
  absl::Status ProbeGains(BucketState& s, const gravac::Decision& decision,
                          const float* a, int64_t step,
                          std::vector<double>* stats)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A policy bucket's pending decision, norms, PowerSGD warm starts and
  // accumulator into a checkpoint's bucket (the reducer's format; the warm
  // starts downloaded on `copy`, a stream of the bucket's device that this
  // thread owns; the accumulator by the caller), and back from a loaded one.
  absl::Status SavePolicyState(const BucketState& s, Stream* copy,
                               SavedBucket* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status RestorePolicyState(const proto::BucketCompressionState& r,
                                  BucketState* s)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The bucket's time of its previous step (CompressedReducer's
  // PreviousStepSeconds over the device steps).
  double PreviousStepSeconds(BucketState& s,
                             std::chrono::steady_clock::time_point now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Host copies of `from`'s valid entries (ExportResiduals and
  // ExportVelocities), after the steps that wrote them.
  absl::StatusOr<std::vector<ResidualStore::Entry>> ExportEntries(
      const std::map<std::string, Residual>& from)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records the event ExportResiduals waits for.
  absl::Status MarkResidualsWritten(const Target& target)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Config config_;
  const int rank_;
  const int size_;
  CompressedReducer* const reducer_;

  absl::Mutex mu_;
  std::map<Device::Kind, std::unique_ptr<DeviceOps>> ops_ ABSL_GUARDED_BY(mu_);
  std::map<int, std::unique_ptr<BucketState>> buckets_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Residual> residuals_ ABSL_GUARDED_BY(mu_);
  // Momentum-correction velocities, by tensor (as residuals_).
  std::map<std::string, Residual> velocities_ ABSL_GUARDED_BY(mu_);
  // Residuals dropped between steps, freed after their stream's work.
  std::vector<Residual> graveyard_ ABSL_GUARDED_BY(mu_);
  // A load happened: the residuals here are stale (dropped at the next
  // step; ExportResiduals exports none).
  bool stale_ ABSL_GUARDED_BY(mu_) = false;
  // Time and bytes of every device step so far (PreviousStepSeconds).
  double own_seconds_total_ ABSL_GUARDED_BY(mu_) = 0;
  double own_bytes_total_ ABSL_GUARDED_BY(mu_) = 0;
  // Per stream: recorded after the last step's residual writes.
  std::map<Stream*, std::unique_ptr<Event>> written_ ABSL_GUARDED_BY(mu_);
};

}  // namespace terse

#endif  // TERSE_ENGINE_DEVICE_COMPRESSION_H_
