#!/bin/bash
# Three process groups in turn: the uninterrupted run, a run that saves a
# checkpoint, and a NEW mpirun that restores it and continues; the last
# compares its parameters with the first's.
#   tests/python/checkpoint_test.sh NP SCRIPT [COMPRESSION [CF]]
# (SCRIPT is ignored: the py_mpi_test macro passes it.) The test model's
# tensors are small, so TERSE_MIN_COMPRESS_BYTES=0 lets them be compressed.
set -eu
np=$1
dir=$(mktemp -d "${TEST_TMPDIR:-/tmp}/checkpoint.XXXXXX")
export TERSE_COMPRESSION=${3:-none}
export TERSE_CF=${4:-10}
export TERSE_MIN_COMPRESS_BYTES=0
# The script enqueues a step's gradients together; a long cycle puts them in
# one bucket, the same in every process group (see train() there).
export TERSE_CYCLE_TIME_MS=100
echo "checkpoint test: $np ranks, TERSE_COMPRESSION=$TERSE_COMPRESSION TERSE_CF=$TERSE_CF"
run="tests/python/run_py_mpi.sh $np tests/python/checkpoint_test.py --dir $dir"
$run --phase full
$run --phase save
$run --phase resume
