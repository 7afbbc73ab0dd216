#!/bin/bash
# Runs a Python test script with terse's TensorFlow environment
# (/opt/terse-tf-venv, tools/setup_tf.sh) under mpirun, with the terse
# package, the TensorFlow op library and the shared test helpers from this
# test's runfiles on PYTHONPATH.
#   tests/tensorflow/run_tf_mpi.sh NP SCRIPT [ARGS...]
# NP 0 runs the script once, without mpirun.
set -u
np=$1; shift
script=$1; shift
root=$PWD
python=/opt/terse-tf-venv/bin/python
if [ ! -x "$python" ]; then
  echo "run_tf_mpi: $python is missing; run tools/setup_tf.sh" >&2
  exit 1
fi
export PYTHONPATH="$root/bindings/python:$root/tests/python:$root/integration${PYTHONPATH:+:$PYTHONPATH}"
# TensorFlow's start-up chatter (CPU feature notes) is not test output.
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2}
export PYTHONUNBUFFERED=1
# Open MPI spins while it waits; on an oversubscribed machine (2 ranks of
# TensorFlow on 2 cores) the spinning steals the compute of the other rank:
# yield instead (measured 2.7x faster Keras steps).
export OMPI_MCA_mpi_yield_when_idle=${OMPI_MCA_mpi_yield_when_idle:-1}
if [ "$np" = 0 ]; then
  exec "$python" "$script" "$@"
fi
exec "$root/tests/mpirun.sh" "$np" "$python" "$script" "$@"
