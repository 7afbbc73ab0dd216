/* terse_c.h is plain C, and libterse.so answers sensibly before init: the
 * error codes and messages a binding shows its users. No MPI is started. */
#include <stdio.h>
#include <string.h>

#include "bindings/c/terse_c.h"

static int failures = 0;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                              \
    }                                                                          \
  } while (0)

/* Checks that `error` has `code` and a message containing `text`. */
static void ExpectError(terse_error* error, int code, const char* text) {
  CHECK(error != NULL);
  if (error == NULL) return;
  CHECK(terse_error_code(error) == code);
  if (strstr(terse_error_message(error), text) == NULL) {
    fprintf(stderr, "message '%s' lacks '%s'\n", terse_error_message(error),
            text);
    ++failures;
  }
  terse_error_free(error);
}

static void Unused(void* user_data, const terse_error* error,
                   const terse_allgather_result* result) {
  (void)user_data;
  (void)error;
  (void)result;
  ++failures; /* Never called: the enqueue failed. */
}

int main(void) {
  const int kInvalidArgument = 3;
  const int kFailedPrecondition = 9;
  const char* not_init = "terse is not initialised; call init() first";
  float x[4] = {1, 2, 3, 4};
  int64_t shape[1] = {4};
  int64_t handle = 0;
  int value = -1;

  CHECK(terse_abi_version() == TERSE_C_ABI_VERSION);
  CHECK(terse_is_initialized() == 0);
  CHECK(terse_error_code(NULL) == 0);
  terse_error_free(NULL);

  ExpectError(terse_rank(&value), kFailedPrecondition, not_init);
  ExpectError(terse_size(&value), kFailedPrecondition, not_init);
  ExpectError(terse_local_rank(&value), kFailedPrecondition, not_init);
  ExpectError(terse_local_size(&value), kFailedPrecondition, not_init);
  CHECK(value == -1);
  ExpectError(terse_barrier(), kFailedPrecondition, not_init);
  ExpectError(terse_allreduce_async("x", x, x, 4, TERSE_FLOAT32,
                                    TERSE_DEVICE_CPU, shape, 1, TERSE_OP_SUM,
                                    1.0, 1.0, NULL, NULL, &handle),
              kFailedPrecondition, not_init);
  ExpectError(terse_allreduce_async("x", x, x, 4, TERSE_FLOAT32,
                                    TERSE_DEVICE_CPU, shape, 1, TERSE_OP_SUM,
                                    1.0, 1.0, Unused, NULL, NULL),
              kFailedPrecondition, not_init);
  ExpectError(terse_broadcast_async("x", x, 4, TERSE_FLOAT32, TERSE_DEVICE_CPU,
                                    shape, 1, 0, Unused, NULL, NULL),
              kFailedPrecondition, not_init);

  /* Malformed arguments are InvalidArgument, checked before the engine. */
  ExpectError(terse_allreduce_async(NULL, x, x, 4, TERSE_FLOAT32,
                                    TERSE_DEVICE_CPU, shape, 1, TERSE_OP_SUM,
                                    1.0, 1.0, NULL, NULL, &handle),
              kInvalidArgument, "name is NULL");
  ExpectError(
      terse_allreduce_async("x", x, x, 4, 99, TERSE_DEVICE_CPU, shape, 1,
                            TERSE_OP_SUM, 1.0, 1.0, NULL, NULL, &handle),
      kInvalidArgument, "unsupported dtype code 99");
  ExpectError(
      terse_allreduce_async("x", x, x, 4, TERSE_FLOAT32, TERSE_DEVICE_CPU,
                            shape, 1, 7, 1.0, 1.0, NULL, NULL, &handle),
      kInvalidArgument, "unknown reduce op code 7");
  ExpectError(
      terse_allgather_async("x", NULL, 4, TERSE_FLOAT32, TERSE_DEVICE_CPU,
                            shape, 1, NULL, NULL, &handle),
      kInvalidArgument, "NULL data pointer");
  ExpectError(
      terse_allreduce_async("x", x, x, 4, TERSE_FLOAT32, TERSE_DEVICE_CPU,
                            shape, 1, TERSE_OP_SUM, 1.0, 1.0, NULL, NULL, NULL),
      kInvalidArgument, "callback or a handle");
  ExpectError(terse_rank(NULL), kInvalidArgument, "rank is NULL");
  ExpectError(terse_save_compression_state_to_file("/tmp/x"),
              kFailedPrecondition, not_init);
  ExpectError(terse_load_compression_state_from_file("/tmp/x"),
              kFailedPrecondition, not_init);
  ExpectError(terse_save_compression_state_to_file(NULL), kInvalidArgument,
              "path is NULL");
  ExpectError(terse_load_compression_state_from_file(NULL), kInvalidArgument,
              "path is NULL");

  /* A bad configuration names the variable; shutdown is idempotent. */
  {
    const char* names[1] = {"TERSE_CYCLE_TIME_MS"};
    const char* values[1] = {"fast"};
    ExpectError(terse_init(names, values, 1), kInvalidArgument,
                "TERSE_CYCLE_TIME_MS");
  }
  CHECK(terse_shutdown() == NULL);
  CHECK(terse_is_initialized() == 0);

  if (failures == 0) printf("terse_c_header_test: all checks passed\n");
  return failures == 0 ? 0 : 1;
}
