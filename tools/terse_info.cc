// terse_info: what this build of terse has and how it is configured.
//
// Prints the version, the backends compiled in (Open MPI, NCCL, CUDA) with
// their library versions, whether a GPU answers, and the effective TERSE_*
// configuration. Exits 2 with the configuration error when a TERSE_* variable
// is bad, so launch scripts can check a configuration before starting ranks.
//
//   terse_info               everything above
//   terse_info --knobs       the table of every TERSE_* variable
#include <mpi.h>

#include <cstdio>
#include <cstring>

#include "common/config.h"
#include "common/cuda_probe.h"
#include "common/version.h"

namespace {

void PrintKnobs() {
  for (const terse::KnobDoc& k : terse::ConfigKnobDocs()) {
    std::printf("%-30s %-6s default %-12s %s\n    accepted: %s\n",
                k.name.c_str(), k.unit.c_str(),
                k.default_value.empty() ? "(unset)" : k.default_value.c_str(),
                k.doc.c_str(), k.accepted.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--knobs") == 0) {
    PrintKnobs();
    return 0;
  }
  absl::StatusOr<terse::Config> config = terse::Config::FromEnvironment();
  if (!config.ok()) {
    std::fprintf(stderr, "terse_info: bad configuration: %s\n",
                 std::string(config.status().message()).c_str());
    return 2;
  }

  std::printf("terse %s\n", terse::kVersion);
  char mpi_version[MPI_MAX_LIBRARY_VERSION_STRING];
  int length = 0;
  MPI_Get_library_version(mpi_version, &length);
  const char* newline = std::strchr(mpi_version, '\n');
  std::printf("backend mpi:  built (%.*s)\n",
              newline ? static_cast<int>(newline - mpi_version) : length,
              mpi_version);
  terse::CudaInfo cuda = terse::ProbeCuda();
  std::printf("backend nccl: built (NCCL %d.%d.%d)\n",
              cuda.nccl_version / 10000, (cuda.nccl_version / 100) % 100,
              cuda.nccl_version % 100);
  std::printf("cuda:         built (runtime %d.%d)\n",
              cuda.runtime_version / 1000, (cuda.runtime_version % 1000) / 10);
  if (cuda.device_count > 0) {
    std::printf("gpu:          %d device(s)\n", cuda.device_count);
  } else {
    std::printf("gpu:          none (%s)\n", cuda.why_none.c_str());
  }
  std::printf("\neffective configuration:\n%s", config->Describe().c_str());
  return 0;
}
