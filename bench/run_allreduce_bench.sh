#!/bin/bash
# Builds and runs bench/allreduce_bench (terse's engine against raw MPI) under
# mpirun with the flags tools/terserun uses on one host: --bind-to none,
# shared memory plus TCP on loopback (--mca btl self,vader,tcp, TCP and OOB
# on lo), and, with more ranks than cores, --oversubscribe and
# OMPI_MCA_mpi_yield_when_idle=1 (waiting ranks yield their core).
#   bench/run_allreduce_bench.sh [NP] [bench flags...]   (NP defaults to 4)
# Several minutes with 4 ranks on 2 cores; --max_bytes=16777216 --rounds=2
# for a quick look. Prints a table and a JSON line.
set -euo pipefail
cd "$(dirname "$0")/.."
np=${1:-4}
shift || true
bazel build //bench:allreduce_bench >&2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
extra=()
if (( np > $(nproc) )); then
  export OMPI_MCA_mpi_yield_when_idle=1
  extra+=(--oversubscribe)
fi
exec mpirun -np "$np" --bind-to none --map-by slot "${extra[@]}" \
  --mca btl self,vader,tcp --mca btl_tcp_if_include lo \
  --mca oob_tcp_if_include lo \
  bazel-bin/bench/allreduce_bench "$@"
