#!/bin/bash
# Three process groups in turn: the uninterrupted run, a run that saves a
# checkpoint, and a NEW mpirun that restores it and continues; the last
# compares its parameters with the first's.
#   tests/python/checkpoint_test.sh NP
set -eu
np=$1
dir=$(mktemp -d "${TEST_TMPDIR:-/tmp}/checkpoint.XXXXXX")
export TERSE_COMPRESSION=none
run="tests/python/run_py_mpi.sh $np tests/python/checkpoint_test.py --dir $dir"
$run --phase full
$run --phase save
$run --phase resume
