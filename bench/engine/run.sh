#!/bin/bash
# Builds and runs engine_bench under mpirun -np 4 on this machine (about a
# minute or two). Extra arguments go to engine_bench, e.g. --steps 4.
#   bench/engine/run.sh [ARGS...]
# TRANSPORT=shm (default: shared memory between the ranks, what one machine
# uses) or TRANSPORT=tcp (TCP over loopback only, as ranks on different
# machines talk: every message pays a network stack's latency).
set -euo pipefail
cd "$(dirname "$0")/../.."
bazel build //bench/engine:engine_bench
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
case "${TRANSPORT:-shm}" in
  shm) btl=self,vader,tcp ;;
  tcp) btl=self,tcp ;;
  *) echo "run.sh: TRANSPORT=${TRANSPORT} is not shm or tcp" >&2; exit 2 ;;
esac
np=${NP:-4}
# More ranks than cores (4 on 2 here): waiting ranks yield their core, as
# under tools/terserun's recommended settings.
if (( np > $(nproc) )); then export OMPI_MCA_mpi_yield_when_idle=1; fi
exec mpirun -np "$np" --oversubscribe --bind-to none \
  --mca btl "$btl" --mca btl_tcp_if_include lo \
  --mca oob_tcp_if_include lo \
  bazel-bin/bench/engine/engine_bench \
  --shapes bench/engine/resnet50_param_shapes.tsv "$@"
