// The EFCP preconditioner interface (DESIGN §3, §6): full-matrix
// preconditioners over one flat float vector of `dim()` parameters.
//
// Implementations: DenseMfac, SparseMfac (EFCP), Ggt, SparseGgt on host
// memory; CudaDenseMfac and CudaSparseMfac take device pointers (their
// headers say so). Each keeps a ring buffer ("window") of recent gradients
// and turns a gradient into an update direction; PreconditionedOptimizer
// (optimizer_step.h) applies lr, weight decay and momentum to parameters.
//
// Errors: a bad argument (wrong length, NaN or Inf in the input, a corrupt
// state blob) is an InvalidArgument Status and leaves the state exactly as it
// was. Implementations are not thread-safe: one caller at a time (the
// Python optimizer steps from one thread). Internally they may use a few
// short-lived worker threads per call.
#ifndef TERSE_EFCP_PRECONDITIONER_H_
#define TERSE_EFCP_PRECONDITIONER_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace terse {
namespace efcp {

// Bytes held, by part. `window` is the gradient history (dense rows or the
// sparse encoding), `error` the error-feedback buffer (sparse variants),
// `small` the m x m matrices and factorisations, `scratch` other buffers.
struct MemoryUsage {
  int64_t window = 0;
  int64_t error = 0;
  int64_t small = 0;
  int64_t scratch = 0;
  int64_t total() const { return window + error + small + scratch; }
};

class Preconditioner {
 public:
  virtual ~Preconditioner() = default;

  // Number of parameters (length of every vector argument).
  virtual int64_t dim() const = 0;

  // Adds `grad` to the history (through error feedback and top-k for the
  // sparse variants) and writes the preconditioned direction into `update`.
  // Both spans have dim() entries and must not overlap. Blocking; O(m*d + m^2)
  // amortised for the dense variants.
  virtual absl::Status Step(absl::Span<const float> grad,
                            absl::Span<float> update) = 0;

  // Applies the current preconditioner to `x` without changing the history.
  virtual absl::Status Apply(absl::Span<const float> x,
                             absl::Span<float> out) const = 0;

  // Number of successful Step calls (restored by RestoreState).
  virtual int64_t steps() const = 0;

  virtual MemoryUsage memory() const = 0;
  int64_t memory_bytes() const { return memory().total(); }

  // Serialises the history, error buffer, small matrices and counters into a
  // versioned byte blob (state_blob.h), e.g. for a Python state_dict.
  virtual std::string SaveState() const = 0;
  // Restores a blob written by SaveState of the same kind and shape (dim,
  // window size, storage); hyper-parameters such as the damping come from
  // this object's options. On error the state is untouched.
  virtual absl::Status RestoreState(absl::string_view blob) = 0;

  // "dense_mfac", "sparse_mfac", "ggt" or "sparse_ggt".
  virtual absl::string_view name() const = 0;
};

}  // namespace efcp
}  // namespace terse

#endif  // TERSE_EFCP_PRECONDITIONER_H_
