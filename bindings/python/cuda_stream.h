// Ordering a framework's CUDA stream before terse reads a tensor.
//
// A framework enqueues the kernels that produce a gradient on its current CUDA
// stream and hands the tensor to terse at once. Before the engine may read the
// tensor those kernels must have finished: the bindings call
// SynchronizeStream() with the framework's stream (as an integer, so the
// bindings never compile against the framework) before enqueueing.
//
// Thread-safety: safe from any thread; blocks the caller until the stream's
// work has completed.
#ifndef TERSE_BINDINGS_PYTHON_CUDA_STREAM_H_
#define TERSE_BINDINGS_PYTHON_CUDA_STREAM_H_

#include <cstdint>

#include "absl/status/status.h"

namespace terse {

// Waits for every operation queued on `stream` (a cudaStream_t as an integer;
// 0 is the legacy default stream of `device`) of CUDA device `device`.
// Restores the calling thread's current device. FailedPrecondition when no
// CUDA device answers; Internal with the runtime's message on other errors.
absl::Status SynchronizeStream(int device, uintptr_t stream);

}  // namespace terse

#endif  // TERSE_BINDINGS_PYTHON_CUDA_STREAM_H_
