#include "bindings/python/build_info.h"

#include <mpi.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/cuda_probe.h"
#include "common/version.h"

namespace terse {

std::string BuildInfo(const Config& config) {
  std::string out = absl::StrCat("terse ", kVersion, "\n");
  char mpi_version[MPI_MAX_LIBRARY_VERSION_STRING];
  int length = 0;
  MPI_Get_library_version(mpi_version, &length);
  const char* newline =
      static_cast<const char*>(std::memchr(mpi_version, '\n', length));
  int shown = newline ? static_cast<int>(newline - mpi_version) : length;
  absl::StrAppendFormat(&out, "backend mpi:  built (%.*s)\n", shown,
                        mpi_version);
  CudaInfo cuda = ProbeCuda();
  absl::StrAppendFormat(
      &out, "backend nccl: built (NCCL %d.%d.%d)\n", cuda.nccl_version / 10000,
      (cuda.nccl_version / 100) % 100, cuda.nccl_version % 100);
  absl::StrAppendFormat(&out, "cuda:         built (runtime %d.%d)\n",
                        cuda.runtime_version / 1000,
                        (cuda.runtime_version % 1000) / 10);
  if (cuda.device_count > 0) {
    absl::StrAppendFormat(&out, "gpu:          %d device(s)\n",
                          cuda.device_count);
  } else {
    absl::StrAppend(&out, "gpu:          none (", cuda.why_none, ")\n");
  }
  absl::StrAppend(&out, "\neffective configuration:\n", config.Describe());
  return out;
}

}  // namespace terse
