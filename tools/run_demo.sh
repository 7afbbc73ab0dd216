#!/bin/bash
# The main job (README): set-up, build, then a 4-rank data-parallel training
# run of a small CNN on Fashion-MNIST with terse's adaptive compression
# (GraVAC) on the library's defaults otherwise. Extra arguments go to the
# training script (e.g. --epochs 1).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
bazel build //tools:terse_info //bindings/python:_terse.so
bazel-bin/tools/terse_info | head -5
export TERSE_COMPRESSION=${TERSE_COMPRESSION:-gravac}
export PYTHONPATH="$PWD/bindings/python${PYTHONPATH:+:$PYTHONPATH}"
exec tools/terserun -np 4 /usr/bin/python3 integration/torch_fashion_mnist.py "$@"
