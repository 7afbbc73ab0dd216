// What this build of terse has: the text `terse_info` prints, for the Python
// module (`terse.build_info()`, `terserun --check-build` after `pip install`).
//
// Thread-safety: safe from any thread. Never fails: a probe that cannot answer
// is reported in the text.
#ifndef TERSE_BINDINGS_PYTHON_BUILD_INFO_H_
#define TERSE_BINDINGS_PYTHON_BUILD_INFO_H_

#include <string>

#include "common/config.h"

namespace terse {

// The version, the backends compiled in (Open MPI, NCCL, CUDA) with their
// library versions, whether a GPU answers, and `config.Describe()`.
// Does not need MPI to be initialised.
std::string BuildInfo(const Config& config);

}  // namespace terse

#endif  // TERSE_BINDINGS_PYTHON_BUILD_INFO_H_
