// Status helpers shared by every package.
//
// Errors cross module boundaries as absl::Status / absl::StatusOr; these macros
// keep the propagation short. They never throw and evaluate their argument
// exactly once.
#ifndef TERSE_COMMON_STATUS_H_
#define TERSE_COMMON_STATUS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define TERSE_STATUS_CONCAT_INNER_(a, b) a##b
#define TERSE_STATUS_CONCAT_(a, b) TERSE_STATUS_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` (an absl::Status) is not OK.
#define TERSE_RETURN_IF_ERROR(expr)              \
  do {                                           \
    ::absl::Status terse_status_ = (expr);       \
    if (!terse_status_.ok()) return terse_status_; \
  } while (0)

// `lhs = value of expr` for an absl::StatusOr<T> expression, or returns its
// error from the enclosing function.
#define TERSE_ASSIGN_OR_RETURN(lhs, expr)                                   \
  TERSE_ASSIGN_OR_RETURN_IMPL_(                                             \
      TERSE_STATUS_CONCAT_(terse_statusor_, __LINE__), lhs, expr)

#define TERSE_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                 \
  if (!statusor.ok()) return statusor.status();           \
  lhs = std::move(statusor).value()

#endif  // TERSE_COMMON_STATUS_H_
