#!/bin/bash
# Builds and runs engine_bench under mpirun -np 4 on this machine (about a
# minute or two). Extra arguments go to engine_bench, e.g. --steps 4.
#   bench/engine/run.sh [ARGS...]
set -euo pipefail
cd "$(dirname "$0")/../.."
bazel build //bench/engine:engine_bench
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
exec mpirun -np "${NP:-4}" --oversubscribe --bind-to none \
  --mca btl self,vader,tcp --mca btl_tcp_if_include lo \
  --mca oob_tcp_if_include lo \
  bazel-bin/bench/engine/engine_bench \
  --shapes bench/engine/resnet50_param_shapes.tsv "$@"
