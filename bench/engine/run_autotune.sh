#!/bin/bash
# Builds and runs autotune_bench under mpirun -np 4 (shared memory, the
# settings of run.sh): TERSE_AUTOTUNE against a sweep of fixed settings.
# Extra arguments go to autotune_bench, e.g. --workloads small --steps 3.
set -euo pipefail
cd "$(dirname "$0")/../.."
bazel build //bench/engine:autotune_bench
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
np=${NP:-4}
if (( np > $(nproc) )); then export OMPI_MCA_mpi_yield_when_idle=1; fi
exec mpirun -np "$np" --oversubscribe --bind-to none \
  --mca btl self,vader,tcp --mca btl_tcp_if_include lo \
  --mca oob_tcp_if_include lo \
  bazel-bin/bench/engine/autotune_bench \
  --shapes bench/engine/resnet50_param_shapes.tsv "$@"
