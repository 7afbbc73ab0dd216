/* terse's C ABI: the one process-wide engine behind plain C functions.
 *
 * libterse.so exports only these symbols. Every framework binding of a
 * process (the pybind11 module, the TensorFlow op library, ctypes) links
 * this one library, so they share one engine: init() through any of them
 * starts it for all. No C++ exception, absl or STL type crosses this
 * boundary; errors are `terse_error` objects.
 *
 * Errors: a function that can fail returns `terse_error*`, NULL on success.
 * A non-NULL error is owned by the caller and released with
 * terse_error_free(). Its code is an absl/TensorFlow canonical status code
 * (3 InvalidArgument, 5 NotFound, 9 FailedPrecondition, 12 Unimplemented,
 * 13 Internal, ...); its message is the engine's, e.g. "terse is not
 * initialised; call init() first" before terse_init().
 *
 * Threads: every function is thread-safe. Enqueueing never blocks on the
 * network; terse_wait, terse_barrier, terse_join and terse_shutdown block.
 *
 * Memory: `in`, `out` and `buffer` of an operation must stay valid and
 * untouched until it completes (its callback ran, or terse_wait returned).
 * `name` and `shape` are copied before the enqueue call returns.
 *
 * Completion: an enqueue function takes either a callback or a handle.
 *   - done != NULL: the library owns the operation; `done(user_data, error,
 *     result)` runs exactly once, on the library's completion thread (never
 *     inside the enqueue call), if and only if the enqueue returned NULL.
 *     `error` is NULL on success; `error` and `result` are borrowed for the
 *     duration of the call. `result` is the gathered tensor of a successful
 *     allgather, else NULL. A callback may enqueue new operations; it must
 *     not call terse_shutdown (that returns FailedPrecondition) and should
 *     not block on other operations.
 *   - done == NULL: *handle receives the operation's handle, to be finished
 *     with terse_wait (and terse_take_allgather for an allgather).
 * terse_shutdown fails pending operations ("terse was shut down") and runs
 * their callbacks before it returns.
 */
#ifndef TERSE_BINDINGS_C_TERSE_C_H_
#define TERSE_BINDINGS_C_TERSE_C_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped whenever a signature or a code below changes. */
#define TERSE_C_ABI_VERSION 4
int terse_abi_version(void);

/* Element types: the values of terse::DataType. */
enum {
  TERSE_FLOAT32 = 0,
  TERSE_FLOAT16 = 1,
  TERSE_BFLOAT16 = 2,
  TERSE_FLOAT64 = 3,
  TERSE_INT32 = 4,
  TERSE_INT64 = 5,
  TERSE_UINT8 = 6,
  TERSE_INT8 = 7,
  TERSE_INT16 = 8,
  TERSE_BOOL = 9 /* broadcast and allgather only; allreduce refuses it */
};

/* Reductions: the values of terse::ReduceOp. */
enum {
  TERSE_OP_SUM = 0,
  TERSE_OP_AVERAGE = 1,
  TERSE_OP_MIN = 2,
  TERSE_OP_MAX = 3,
  TERSE_OP_PRODUCT = 4, /* element-wise; integers wrap modulo 2^bits */
  TERSE_OP_ADASUM = 5   /* per tensor, never fused; floats, 2^k ranks */
};

/* Where a tensor lives: TERSE_DEVICE_CPU, or a CUDA ordinal >= 0. */
#define TERSE_DEVICE_CPU (-1)

typedef struct terse_error terse_error;
int terse_error_code(const terse_error* error);
/* Valid until the error is freed; never NULL. */
const char* terse_error_message(const terse_error* error);
void terse_error_free(terse_error* error);

/* The gathered tensor of an allgather: rank-major, packed. */
typedef struct terse_allgather_result terse_allgather_result;
const void* terse_allgather_result_data(const terse_allgather_result* r);
int64_t terse_allgather_result_nbytes(const terse_allgather_result* r);
int terse_allgather_result_dtype(const terse_allgather_result* r);
int terse_allgather_result_ndim(const terse_allgather_result* r);
/* ndim entries: the sum of the first dimensions, then the rest. */
const int64_t* terse_allgather_result_shape(const terse_allgather_result* r);
int terse_allgather_result_num_ranks(const terse_allgather_result* r);
/* num_ranks entries: each rank's first dimension. */
const int64_t* terse_allgather_result_first_dims(
    const terse_allgather_result* r);
void terse_allgather_result_free(terse_allgather_result* r);

typedef void (*terse_done_fn)(void* user_data, const terse_error* error,
                              const terse_allgather_result* result);

/* Starts the engine with the configuration parsed from `count` TERSE_*
 * names and values (unset names take their defaults; a bad value is
 * InvalidArgument naming the variable). FailedPrecondition if running. */
terse_error* terse_init(const char* const* names, const char* const* values,
                        size_t count);
/* terse_init with the process environment's TERSE_* variables. */
terse_error* terse_init_from_environment(void);
/* Stops the engine (see above). Idempotent; NULL when not running. */
terse_error* terse_shutdown(void);
int terse_is_initialized(void);
/* The error the engine stopped with (NULL while it runs, or when terse is
 * not initialised); after one, every op fails until terse_shutdown and a
 * new terse_init. */
terse_error* terse_fatal_status(void);

terse_error* terse_rank(int* rank);
terse_error* terse_size(int* size);
terse_error* terse_local_rank(int* local_rank);
terse_error* terse_local_size(int* local_size);

/* Reduces `count` elements of `in` over all ranks into `out` (may equal
 * `in`). `shape` has `ndim` entries whose product is `count`; it must agree
 * across ranks. prescale/postscale multiply the input before / the result
 * after the reduction (floating-point types). */
terse_error* terse_allreduce_async(const char* name, const void* in, void* out,
                                   int64_t count, int dtype, int device,
                                   const int64_t* shape, int ndim, int op,
                                   double prescale, double postscale,
                                   terse_done_fn done, void* user_data,
                                   int64_t* handle);
/* terse_allreduce_async with this operation's compression spec
 * `compression`: "policy[:cf]" with policy a TERSE_COMPRESSION word ("fp16",
 * "topk:100", "gravac"); NULL or "": the engine's policy (TERSE_COMPRESSION,
 * TERSE_COMPRESSION_RULES). Every rank must pass the same spec for the same
 * tensor (else the op fails on every rank, naming the tensor and the
 * ranks); tensors of different specs never share a fused bucket. A bad spec
 * is InvalidArgument. */
terse_error* terse_allreduce_compressed_async(
    const char* name, const void* in, void* out, int64_t count, int dtype,
    int device, const int64_t* shape, int ndim, int op, double prescale,
    double postscale, const char* compression, terse_done_fn done,
    void* user_data, int64_t* handle);
/* Concatenates every rank's tensor along dimension 0 (ndim >= 1; first
 * dimensions may differ across ranks, the others must agree). */
terse_error* terse_allgather_async(const char* name, const void* in,
                                   int64_t count, int dtype, int device,
                                   const int64_t* shape, int ndim,
                                   terse_done_fn done, void* user_data,
                                   int64_t* handle);
/* Overwrites `buffer` on every rank with root_rank's, in place. */
terse_error* terse_broadcast_async(const char* name, void* buffer,
                                   int64_t count, int dtype, int device,
                                   const int64_t* shape, int ndim,
                                   int root_rank, terse_done_fn done,
                                   void* user_data, int64_t* handle);

/* Process sets (engine/engine.h): a set is a sorted list of world ranks
 * with an id, 0 for every rank. The *_set_async variants take the set's id
 * (the plain ones use 0); the caller must be in the set; a broadcast's
 * root_rank is a world rank in the set. Names are unique per set.
 *
 * `stream` (device tensors): the producer's stream, a cudaStream_t, on
 * which the data is still being written. terse records an event on it now
 * and its own stream waits for that event before reading the tensor (no
 * host wait, as Horovod's ready events); the caller keeps the memory alive
 * until the op completes, as always. The legacy default stream is
 * cudaStreamLegacy ((void*)1). NULL: the data is ready now (the caller has
 * synchronised). Ignored for host tensors. */
terse_error* terse_allreduce_set_async(
    const char* name, const void* in, void* out, int64_t count, int dtype,
    int device, const int64_t* shape, int ndim, int op, double prescale,
    double postscale, const char* compression, int process_set, void* stream,
    terse_done_fn done, void* user_data, int64_t* handle);
terse_error* terse_allgather_set_async(const char* name, const void* in,
                                       int64_t count, int dtype, int device,
                                       const int64_t* shape, int ndim,
                                       int process_set, void* stream,
                                       terse_done_fn done, void* user_data,
                                       int64_t* handle);
terse_error* terse_broadcast_set_async(const char* name, void* buffer,
                                       int64_t count, int dtype, int device,
                                       const int64_t* shape, int ndim,
                                       int root_rank, int process_set,
                                       void* stream, terse_done_fn done,
                                       void* user_data, int64_t* handle);
/* terse_init with static process sets: set i holds set_sizes[i] ranks,
 * taken in order from `ranks`; they get ids 1, 2, ... Each sorted and
 * distinct, none of every rank, none twice (else InvalidArgument). */
terse_error* terse_init_with_process_sets(const char* const* names,
                                          const char* const* values,
                                          size_t count, const int* ranks,
                                          const int* set_sizes, int num_sets);
/* terse_init_with_process_sets on other processes than MPI_COMM_WORLD's
 * (Horovod's init(comm=...)):
 *   mpi_comm: NULL for MPI_COMM_WORLD, or the address of an MPI_Comm (an
 *     `MPI_Comm*`; mpi4py: MPI._addressof(comm)) that terse duplicates. The
 *     handle is read during the call only; the caller keeps the
 *     communicator and may free it afterwards. Not MPI_COMM_NULL, not an
 *     intercommunicator (InvalidArgument).
 *   world_ranks: NULL with num_world_ranks 0 for every process of that
 *     communicator, or num_world_ranks distinct ranks of it to run on, in
 *     any order: terse rank i is world_ranks[i]. A rank out of range or
 *     listed twice is InvalidArgument on every caller; a process not in the
 *     list gets InvalidArgument naming its rank and the list, having sent
 *     nothing (the listed processes go on without it). Every listed process
 *     must pass the same list.
 * Blocks until every process of the new world has called it. terse_rank,
 * terse_size, terse_local_rank, terse_local_size and the process sets'
 * ranks are then those of the new world. */
terse_error* terse_init_with_comm(const char* const* names,
                                  const char* const* values, size_t count,
                                  const int* ranks, const int* set_sizes,
                                  int num_sets, const int* world_ranks,
                                  int num_world_ranks, const void* mpi_comm);
/* Collective over EVERY rank, in the same order everywhere: registers the
 * set of `n` sorted ranks; *id receives its id. AlreadyExists when a set of
 * these ranks exists; InvalidArgument when ranks differ between callers. */
terse_error* terse_add_process_set(const int* ranks, int n, int* id);
/* Collective over every rank: unregisters set `id` (its pending ops fail).
 * NotFound for an unknown id; InvalidArgument for 0. */
terse_error* terse_remove_process_set(int id);
/* The number of ranks of set `id`, and its ranks (capacity >= that). */
terse_error* terse_process_set_size(int id, int* size);
terse_error* terse_process_set_ranks(int id, int* ranks, int capacity);
/* terse_barrier over the ranks of set `process_set`. */
terse_error* terse_barrier_set(int process_set);

/* *done = 1 once the operation completed. NotFound for an unknown handle. */
terse_error* terse_poll(int64_t handle, int* done);
/* Blocks until the operation completes; returns its error. Releases the
 * handle, except a successful allgather's, alltoall's or reducescatter's
 * (see terse_take_allgather and the others). */
terse_error* terse_wait(int64_t handle);
/* After terse_wait(handle) succeeded for an allgather: its result (free it
 * with terse_allgather_result_free); releases the handle. */
terse_error* terse_take_allgather(int64_t handle,
                                  terse_allgather_result** result);

/* Alltoall and reducescatter of CPU tensors (engine/engine.h): one
 * collective each, never fused; a device tensor is Unimplemented. Their
 * results are terse_allgather_result objects, taken after terse_wait with
 * terse_take_alltoall / terse_take_reducescatter (or passed to the
 * callback), freed with terse_allgather_result_free.
 *
 * Alltoall: sends splits[j] rows of `in` (ndim >= 1) to rank j of the set,
 * in order; nsplits = the set's size, or 0 for equal parts. Splits that do
 * not fit the tensor (a count other than the set's size, a negative entry,
 * a sum other than shape[0], or no splits and shape[0] not divisible by the
 * size) fail the op on every rank at terse_wait, naming this rank and the
 * reason. Dtype and the dimensions after the first must agree across
 * ranks. Result: the rows from each rank, packed in rank
 * order; first_dims = the rows received from each rank. */
terse_error* terse_alltoall_set_async(const char* name, const void* in,
                                      int64_t count, int dtype, int device,
                                      const int64_t* shape, int ndim,
                                      const int64_t* splits, int nsplits,
                                      int process_set, terse_done_fn done,
                                      void* user_data, int64_t* handle);
/* Reducescatter: the reduction of `in` (ndim >= 1; shape, dtype, op and
 * scales as terse_allreduce_async's, agreed across ranks; not Adasum), of
 * which set rank i receives its rows of dimension 0: shape[0] / size each,
 * the first shape[0] % size ranks one more (Horovod's split). Result: this
 * rank's rows; first_dims = every rank's row count. */
terse_error* terse_reducescatter_set_async(
    const char* name, const void* in, int64_t count, int dtype, int device,
    const int64_t* shape, int ndim, int op, double prescale, double postscale,
    int process_set, terse_done_fn done, void* user_data, int64_t* handle);
terse_error* terse_take_alltoall(int64_t handle,
                                 terse_allgather_result** result);
terse_error* terse_take_reducescatter(int64_t handle,
                                      terse_allgather_result** result);

/* Grouped ops (engine/engine.h GroupStart/GroupEnd; Horovod's
 * grouped_allreduce; as ncclGroupStart/ncclGroupEnd): the operations this
 * thread enqueues between terse_group_start(name) and terse_group_end() get
 * their handles at once but are queued only at terse_group_end, together,
 * as one group. Negotiation answers them in one cycle once each is ready on
 * every rank; a grouped allreduce fuses only with members of its group; if
 * one fails (a mismatch, a refused alltoall), all fail on every rank with
 * its error. Every rank must group the same ops under the same name; one
 * process set per group. FailedPrecondition: a group already open on this
 * thread (start), none open (end). */
terse_error* terse_group_start(const char* name);
terse_error* terse_group_end(void);

/* Blocks until every rank called terse_barrier. */
terse_error* terse_barrier(void);
/* This rank has no more data (see engine/api.h Join); blocks until every
 * rank joined. *last_rank: the last rank that joined. */
terse_error* terse_join(int* last_rank);

/* Compression (engine/compressed_reducer.h). */

/* What every bucket did on its last step. Strings are valid until the
 * reports are freed; `index` in [0, terse_bucket_reports_count). */
typedef struct terse_bucket_reports terse_bucket_reports;
terse_error* terse_bucket_reports_get(terse_bucket_reports** reports);
int terse_bucket_reports_count(const terse_bucket_reports* reports);
int terse_bucket_report_bucket(const terse_bucket_reports* reports, int index);
int terse_bucket_report_tensors(const terse_bucket_reports* reports, int index);
/* Dense bytes of the bucket. */
int64_t terse_bucket_report_bytes(const terse_bucket_reports* reports,
                                  int index);
/* Describe() of its policy, or "none". */
const char* terse_bucket_report_policy(const terse_bucket_reports* reports,
                                       int index);
/* What it sent last step ("none": dense). */
const char* terse_bucket_report_compressor(const terse_bucket_reports* reports,
                                           int index);
/* Compression factor sent last step. */
double terse_bucket_report_cf(const terse_bucket_reports* reports, int index);
/* Bytes this rank sent for it last step. */
int64_t terse_bucket_report_bytes_sent(const terse_bucket_reports* reports,
                                       int index);
int64_t terse_bucket_report_steps(const terse_bucket_reports* reports,
                                  int index);
/* The id of the process set the bucket belongs to (0: the global set). */
int32_t terse_bucket_report_process_set(const terse_bucket_reports* reports,
                                        int index);
void terse_bucket_reports_free(terse_bucket_reports* reports);

/* Bytes this rank has sent through the compression path so far. */
terse_error* terse_bytes_sent(int64_t* bytes);
/* The learning rate was just lowered (Accordion switches to its low CF). */
terse_error* terse_notify_learning_rate_drop(void);
/* Horovod's start_timeline / stop_timeline (engine/engine.h): this rank
 * starts writing a timeline to `path` ("{rank}" replaced; without it only
 * rank 0 writes), or completes it. Not collective. Start is
 * FailedPrecondition while one is being written. */
terse_error* terse_start_timeline(const char* path);
terse_error* terse_stop_timeline(void);
/* A checkpoint of the compression state (policies, error-feedback
 * residuals): *data (malloc'ed, release with terse_free) of *size bytes. */
terse_error* terse_save_compression_state(char** data, size_t* size);
terse_error* terse_load_compression_state(const char* data, size_t size);
/* The same checkpoint streamed to a file (written to `path`.tmp, then
 * renamed to `path`: a failed save leaves `path` as it was), and loaded from
 * one (a truncated or corrupt file fails, naming the problem, and changes
 * nothing). `path` is a NUL-terminated file name. */
terse_error* terse_save_compression_state_to_file(const char* path);
terse_error* terse_load_compression_state_from_file(const char* path);
/* Releases memory this library malloc'ed for the caller. */
void terse_free(void* memory);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TERSE_BINDINGS_C_TERSE_C_H_ */
