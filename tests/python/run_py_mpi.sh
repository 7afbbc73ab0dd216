#!/bin/bash
# Runs a Python test script under mpirun with the terse package and the
# built extension from this test's runfiles on PYTHONPATH.
#   tests/python/run_py_mpi.sh NP SCRIPT [ARGS...]
set -u
np=$1; shift
script=$1; shift
root=$PWD
export PYTHONPATH="$root/bindings/python:$root/tests/python:$root/integration${PYTHONPATH:+:$PYTHONPATH}"
exec "$root/tests/mpirun.sh" "$np" /usr/bin/python3 "$script" "$@"
