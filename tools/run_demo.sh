#!/bin/bash
# The main job (README): set-up, build, then the multi-rank run.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
bazel build //tools:terse_info //tools:mpi_smoke
bazel-bin/tools/terse_info
mpirun --allow-run-as-root --oversubscribe -np 4 \
  --mca btl self,vader,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
  bazel-bin/tools/mpi_smoke
