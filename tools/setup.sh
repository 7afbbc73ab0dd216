#!/bin/bash
# Installs everything terse needs on a fresh Debian 12 machine, idempotently:
# the Debian packages of shared/toolchain.md and the pinned PyPI packages.
# Safe to run any number of times; does nothing when all is present.
set -euo pipefail

DEBIAN_PACKAGES=(
  bazel-bootstrap libopenmpi-dev openmpi-bin libabsl-dev libprotobuf-dev
  protobuf-compiler libgtest-dev libgmock-dev pybind11-dev python3-dev
  python3-torch python3-numpy libeigen3-dev libopenblas0-pthread
  dataset-fashion-mnist python3-matplotlib iproute2 clang libclang-rt-14-dev
  zlib1g-dev python3-mpi4py
)

missing=()
for pkg in "${DEBIAN_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" ||
    missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

# CUDA 13 + NCCL are part of this machine kind's image (/usr/local/cuda); the
# build compiles and links against them everywhere, GPU or not.
if [ ! -x /usr/local/cuda/bin/nvcc ] || [ ! -e /usr/local/cuda/lib/libnccl.so ]; then
  echo "setup: /usr/local/cuda with nvcc and NCCL is required (see README)" >&2
  exit 1
fi

# TensorFlow (the //bindings/tensorflow op library builds against it): a
# pinned tensorflow-cpu in its own virtual environment, see setup_tf.sh.
"$(dirname "${BASH_SOURCE[0]}")/setup_tf.sh"
