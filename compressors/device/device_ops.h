// DeviceOps: the operations the compressors need on device buffers, so that
// compression of device buckets (engine/device_compression.h) is written once
// for CUDA and for the simulated device CI runs it on.
//
// Every operation ENQUEUES its work on `stream` (a stream of the runtime the
// ops were made for) and returns at once, except SampledTopK, which returns
// a count to the host and so waits for the stream. Pointer arguments are
// device memory of that runtime on the ops' ordinal unless named host_*;
// they must stay valid until the work has run. Results become visible to
// the host only after an event or Synchronize covers them: on the simulated
// device the work runs late on purpose (device/sim_runtime.h), so a missing
// wait reads stale data.
//
// Implementations:
//   simulated device: each operation is the CPU kernel (compressors/kernels,
//     common/half.h) run in stream order (Stream::LaunchHost); results are
//     bitwise those of the CPU compressors. Device spans are checked
//     (CheckDeviceMemory): a host pointer is InvalidArgument.
//   CUDA: compressors/kernels/*_cuda (TopK, SampledTopK, Gather, ScatterAdd)
//     and the kernels of device_ops_cuda.h. Device spans are checked
//     (cudaPointerGetAttributes): a host pointer is InvalidArgument, as on
//     the simulated device. Results equal the CPU's bitwise except
//     SquaredNorm and OrthonormalizeColumns (tree sums in double), the
//     PowerSGD products (below) and ScatterAdd with duplicate indices.
//
// Thread-safety: an instance has no mutable state; calls on one stream come
// from one thread at a time (runtime.h's rule).
#ifndef TERSE_COMPRESSORS_DEVICE_DEVICE_OPS_H_
#define TERSE_COMPRESSORS_DEVICE_DEVICE_OPS_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/data_type.h"
#include "compressors/kernels/select.h"
#include "device/runtime.h"

namespace terse {

class DeviceOps {
 public:
  virtual ~DeviceOps() = default;

  // y[i] += x[i], i < n.
  virtual absl::Status Add(Stream* stream, const float* x, float* y,
                           int64_t n) = 0;
  // DGC's momentum correction (engine/momentum_correction.h): u[i] = m *
  // u[i] + g[i] (two roundings, as the CPU), then g[i] = u[i].
  virtual absl::Status MomentumAccumulate(Stream* stream, float m, float* u,
                                          float* g, int64_t n) = 0;
  // x[i] = 0 where sent[i] != 0 (DGC's masking of what was sent).
  virtual absl::Status ClearWhereSent(Stream* stream, const float* sent,
                                      float* x, int64_t n) = 0;
  // out[i] = x[i] - y[i] (error feedback's a - sent); out may alias x.
  virtual absl::Status Subtract(Stream* stream, const float* x, const float* y,
                                float* out, int64_t n) = 0;
  // out[i] = x[i] rounded to `type` (kFloat16 or kBFloat16; nearest even),
  // as 16-bit patterns.
  virtual absl::Status CastToHalf(Stream* stream, const float* x, uint16_t* out,
                                  int64_t n, DataType type) = 0;
  // y[i] += float(h[i]), h of `type` (kFloat16 or kBFloat16).
  virtual absl::Status AccumulateHalf(Stream* stream, const uint16_t* h,
                                      float* y, int64_t n, DataType type) = 0;
  // *out (one double of device memory) = sum of x[i]^2 accumulated in
  // double: GraVAC's norms, reduced on the device; only the scalar is
  // copied to the host.
  virtual absl::Status SquaredNorm(Stream* stream, const float* x, int64_t n,
                                   double* out) = 0;
  // kernels::TopK: the k largest |x[i]| (ties: lowest indices), ascending.
  // 0 <= k <= d < 2^32.
  virtual absl::Status TopK(Stream* stream, const float* x, int64_t d,
                            int64_t k, uint32_t* indices) = 0;
  // kernels::SampledTopK (DGC), the same indices as the CPU for the same
  // options; waits for the stream and returns how many were selected
  // (indices holds room for k).
  virtual absl::StatusOr<int64_t> SampledTopK(
      Stream* stream, const float* x, int64_t d, int64_t k,
      const kernels::SampledTopKOptions& options, uint32_t* indices) = 0;
  // kernels::ThresholdSearch (RedSync): waits for the stream and returns
  // how many were selected (k <= n < 2k, or k); indices holds room for
  // max(k, 2k - 1). CUDA's mean |x| sums in another order than the CPU's,
  // so its set may differ in rare cases (compressors/kernels/select_cuda.h).
  virtual absl::StatusOr<int64_t> ThresholdSearch(
      Stream* stream, const float* x, int64_t d, int64_t k,
      const kernels::ThresholdSearchOptions& options, uint32_t* indices) = 0;
  // kernels::SelectAtLeast: the ascending i with key(|x[i]|) >= key into
  // indices (room for cap) when at most cap qualify; waits for the stream
  // and returns how many qualify (more than cap: indices unspecified).
  virtual absl::StatusOr<int64_t> SelectAtLeast(Stream* stream, const float* x,
                                                int64_t d, uint32_t key,
                                                int64_t cap,
                                                uint32_t* indices) = 0;
  // values[j] = dense[indices[j]], j < k.
  virtual absl::Status Gather(Stream* stream, const float* dense,
                              const uint32_t* indices, int64_t k,
                              float* values) = 0;
  // dense[indices[j]] += values[j] in j order; indices < the dense size
  // (the caller validated them: decoded payloads, compressors/payload.h).
  virtual absl::Status ScatterAdd(Stream* stream, const uint32_t* indices,
                                  const float* values, int64_t k,
                                  float* dense) = 0;
  // *bad (one uint32 of device memory) = 0 when indices[0..k) are strictly
  // ascending and below d (a sparse payload's kU32 index section,
  // compressors/payload.h), else nonzero: peers' indices validated on the
  // device before a ScatterAdd uses them.
  virtual absl::Status CheckSparseIndices(Stream* stream,
                                          const uint32_t* indices, int64_t k,
                                          uint64_t d, uint32_t* bad) = 0;

  // EF-signSGD (compressors/efsignsgd_compressor.h): per block of `block`
  // elements (the last may be shorter) scales[b] = mean |x| summed in double
  // in kernels::FixedOrderSum's order (compressors/kernels/fixed_order_sum.h),
  // and bits (ceil(d / 8) bytes, zeroed first) with bit i set when x[i]'s
  // sign bit is set. Bitwise the CPU's on both devices (CUDA: a warp per
  // block of at most 4096 elements, a thread block per longer one; one
  // thread per byte for the bits).
  virtual absl::Status SignEncode(Stream* stream, const float* x, int64_t d,
                                  int64_t block, float* scales,
                                  uint8_t* bits) = 0;
  // dense[i] += bit i ? -scales[i / block] : scales[i / block].
  virtual absl::Status SignDecodeAdd(Stream* stream, const float* scales,
                                     const uint8_t* bits, int64_t d,
                                     int64_t block, float* dense) = 0;

  // QSGD (compressors/qsgd_compressor.h): per norm bucket b of `bucket`
  // elements, norms[b] = float(sqrt(sum x^2 in double)) (the sum in
  // kernels::FixedOrderSum's order, a warp or thread block per bucket on
  // CUDA as for SignEncode), and per element a
  // (1 + ceil(log2(levels + 1)))-bit code (level << 1 | sign) packed in a
  // little-endian bit stream, the level rounded stochastically with
  // SplitMix64 draws from seeds[b] (the CPU compressor's per-bucket seed,
  // computed by the caller). `codes` (device) must be zeroed and hold a
  // whole number of 4-byte words. Bitwise the CPU's on both devices.
  virtual absl::Status QsgdEncode(Stream* stream, const float* x, int64_t d,
                                  int64_t bucket, int levels,
                                  const uint64_t* seeds, float* norms,
                                  uint8_t* codes) = 0;
  // The CPU decoder's check of a peer's codes: writes 0 to *bad (device)
  // when each of the d codes packed in `codes` at `levels` (as QsgdEncode
  // packs them: PackedBytes(d, CodeBits(levels)) bytes, any alignment) has
  // a level <= levels, and nonzero when one does not.
  virtual absl::Status CheckQsgdCodes(Stream* stream, const uint8_t* codes,
                                      int64_t d, int levels, uint32_t* bad) = 0;
  // dense[i] += +-(norms[b] / levels) * level_i; levels already validated.
  virtual absl::Status QsgdDecodeAdd(Stream* stream, const float* norms,
                                     const uint8_t* codes, int64_t d,
                                     int64_t bucket, int levels,
                                     float* dense) = 0;

  // PowerSGD's products, row-major float matrices (powersgd_compressor.h):
  //   p (rows x r)  = m (rows x cols) * q (cols x r)      (P = M Q)
  //   q (cols x r)  = m^T * p (rows x r)                  (Q = M^T P^)
  //   m (rows x cols) += p (rows x r) * q^T               (reconstruction)
  // The simulated device evaluates the CPU compressor's Eigen expressions
  // (bitwise its results); CUDA runs one thread per output element,
  // summing in float in index order (FMA contraction: close to, not
  // bitwise, the CPU's).
  virtual absl::Status MatMul(Stream* stream, const float* m, const float* q,
                              float* p, int64_t rows, int64_t cols,
                              int64_t r) = 0;
  virtual absl::Status MatMulTransposed(Stream* stream, const float* m,
                                        const float* p, float* q, int64_t rows,
                                        int64_t cols, int64_t r) = 0;
  virtual absl::Status AddOuterProduct(Stream* stream, const float* p,
                                       const float* q, float* m, int64_t rows,
                                       int64_t cols, int64_t r) = 0;
  // PowerSGD's orthonormalisation of the summed P (compressors/
  // powersgd_plan.h's OrthonormalizeColumns, modified Gram-Schmidt in
  // double) on the r columns of the rows x r row-major p, in place: a
  // column that vanishes or is not finite becomes zero, as on the CPU, so
  // that a step needs no host round trip. The simulated device runs the
  // CPU function (bitwise); CUDA runs one block per call whose dot
  // products and norms are block-wide tree sums in double (within a float
  // rounding of the CPU's for well-conditioned columns, not bitwise).
  virtual absl::Status OrthonormalizeColumns(Stream* stream, float* p,
                                             int64_t rows, int64_t r) = 0;

  // kernels::AddCountSketch (compressors/kernels/count_sketch.h) of x[0, n)
  // with `seed`: sketch[h(i)] += s(i) * x[i] (`buckets` doubles). gravac's
  // portfolio sketches its window sums on the device with it, so that only
  // the sketch (k doubles, not the gradient-sized sums) reaches the host.
  // Bitwise the CPU's on both devices: the CPU kernel sums each bucket
  // exactly in fixed point, so CUDA adds in parallel, in any order
  // (O(n + buckets * blocks) work; device_ops_cuda.h). `scratch`: at least
  // CountSketchScratchBytes(buckets) bytes of device memory, 8-byte
  // aligned, overlapping neither x nor sketch; its contents on entry do not
  // matter, and after the call the stream owns it until the work has run
  // (consecutive calls on one stream may share it).
  virtual absl::Status CountSketch(Stream* stream, const float* x, int64_t n,
                                   uint64_t seed, double* sketch,
                                   int64_t buckets, void* scratch) = 0;
  static constexpr int64_t CountSketchScratchBytes(int64_t buckets) {
    return 12 * buckets + 8;
  }
};

// The ops for `runtime`'s device `ordinal`: the simulated device or CUDA;
// Unimplemented for another kind. `runtime` must outlive the ops.
absl::StatusOr<std::unique_ptr<DeviceOps>> MakeDeviceOps(DeviceRuntime* runtime,
                                                         int ordinal);

}  // namespace terse

#endif  // TERSE_COMPRESSORS_DEVICE_DEVICE_OPS_H_
