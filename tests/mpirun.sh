#!/bin/bash
# Runs a test binary under mpirun on this machine's loopback interface.
#   tests/mpirun.sh NP BINARY [ARGS...]
# Bounded in time (TERSE_MPIRUN_TIMEOUT seconds, default 240) so a hung rank
# fails the test instead of hanging CI. Works as root (Bazel's sandbox too).
set -u
np=$1; shift
bin=$1; shift
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
# More ranks than cores here: a rank waiting in MPI yields its core instead
# of spinning (the Keras test runs 2.7x faster with it on 2 cores).
export OMPI_MCA_mpi_yield_when_idle=1
# Keep Open MPI's session files inside the test's own temp dir.
export TMPDIR=${TEST_TMPDIR:-${TMPDIR:-/tmp}}
exec timeout --signal=KILL "${TERSE_MPIRUN_TIMEOUT:-240}" \
  mpirun -np "$np" --bind-to none \
  --mca btl self,vader,tcp --mca btl_tcp_if_include lo \
  --mca oob_tcp_if_include lo \
  "$bin" "$@"
