// Knobs of the compressors that the TERSE_* table does not carry (or carries
// elsewhere): value precision, index coding, selection parameters. A plain
// value; defaults are the documented behaviour.
#ifndef TERSE_COMPRESSORS_OPTIONS_H_
#define TERSE_COMPRESSORS_OPTIONS_H_

#include <cstdint>

#include "compressors/kernels/select.h"
#include "compressors/payload.h"

namespace terse {

enum class ErrorFeedbackMode { kDefault, kOn, kOff };

struct CompressorOptions {
  // Sparsifiers (topk, dgc, redsync, threshold): value precision and index
  // coding. Default u32 + bf16 = 6 bytes per kept entry; kDelta16 or kVarint
  // bring it to <= 4.
  ValueType value_type = ValueType::kBFloat16;
  IndexCoding index_coding = IndexCoding::kU32;
  // randomk: its values are summed by the allreduce, so fp32 by default.
  ValueType randomk_value_type = ValueType::kFloat32;
  // kDefault: on for lossy compressors (every one but none/fp16/bf16).
  ErrorFeedbackMode error_feedback = ErrorFeedbackMode::kDefault;
  // threshold: keep |x| >= threshold (at most ceil(d / cf), the largest).
  double threshold = 1e-3;
  // dgc and redsync selection parameters (their num_threads is overridden
  // by num_threads below).
  kernels::SampledTopKOptions dgc;
  kernels::ThresholdSearchOptions redsync;
  // powersgd: rank of the factors (TERSE_POWERSGD_RANK), the first step it
  // compresses (TERSE_POWERSGD_START_STEP; steps before it send the bucket
  // uncompressed, like DDP's start_powerSGD_iter), and the least compression
  // rate n*m / (rank*(n+m)) below which a matrix goes uncompressed
  // (TERSE_POWERSGD_MIN_COMPRESSION_RATE, DDP's min_compression_rate).
  int64_t powersgd_rank = 1;
  int64_t powersgd_start_step = 0;
  double powersgd_min_compression_rate = 2;
  // qsgd: levels s (0: from cf, floor(32 / cf) bits per element, 2..16) and
  // elements per norm bucket.
  int qsgd_levels = 0;
  int64_t qsgd_bucket_size = 512;
  // efsignsgd: elements per scale (0: one scale for the whole bucket).
  int64_t sign_block_size = 0;
  // Threads of the CPU kernels (0: hardware threads / ranks on this host,
  // at most 8; see compressors/kernels/thread_pool.h).
  int num_threads = 0;
};

}  // namespace terse

#endif  // TERSE_COMPRESSORS_OPTIONS_H_
