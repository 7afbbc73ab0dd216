#!/bin/bash
# Builds and runs bench/allreduce_bench under mpirun on this machine's
# loopback interface (shared memory between ranks).
#   bench/run_allreduce_bench.sh [NP] [bench flags...]   (NP defaults to 4)
# About 1-2 minutes with 4 ranks on 2 cores. Prints a table and a JSON line.
set -euo pipefail
cd "$(dirname "$0")/.."
np=${1:-4}
shift || true
bazel build //bench:allreduce_bench >&2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
exec mpirun -np "$np" --bind-to none \
  --mca btl self,vader,tcp --mca btl_tcp_if_include lo \
  --mca oob_tcp_if_include lo \
  bazel-bin/bench/allreduce_bench "$@"
