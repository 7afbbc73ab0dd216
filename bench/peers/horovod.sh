#!/usr/bin/env bash
# Builds Horovod 0.28.1 (MPI controller + MPI CPU operations, PyTorch only)
# from PyPI into its own virtual environment, as a peer for the Python
# benchmarks (bench/torch_step_bench.py, bench/py_allreduce_bench.py).
# Not part of CI.
#
#   bench/peers/horovod.sh              # venv at $TERSE_HOROVOD_VENV or /opt/terse-horovod-venv
#   bench/peers/horovod.sh --check      # only report whether the venv is usable
#
# Idempotent: if the venv already imports horovod.torch at 0.28.1 with MPI
# built in, it does nothing. Otherwise it installs the apt packages the build
# needs (libtorch-dev for the headers Debian's python3-torch points at, cmake),
# creates the venv with --system-site-packages over /usr/bin/python3 (so it
# uses Debian's torch, the same torch terse's bindings use) and builds
# horovod from source (about 6 minutes on 2 cores).
#
# The benchmarks launch Horovod with plain `mpirun` and terserun's one-host
# flags, never with horovodrun, so both libraries use the same transport.
set -euo pipefail

VERSION=0.28.1
VENV="${TERSE_HOROVOD_VENV:-/opt/terse-horovod-venv}"
PY=/usr/bin/python3

usable() {
  [[ -x "$VENV/bin/python" ]] || return 1
  "$VENV/bin/python" - "$VERSION" <<'PYEOF' >/dev/null 2>&1
import sys
import horovod
import horovod.torch as hvd
assert horovod.__version__ == sys.argv[1], horovod.__version__
assert hvd.mpi_built(), "horovod built without MPI"
PYEOF
}

if [[ "${1:-}" == "--check" ]]; then
  if usable; then echo "horovod $VERSION usable in $VENV"; exit 0; fi
  echo "horovod $VERSION not usable in $VENV (run bench/peers/horovod.sh)" >&2
  exit 1
fi

if usable; then
  echo "horovod $VERSION already built in $VENV"
else
  if ! "$PY" -c 'import torch' 2>/dev/null; then
    echo "error: $PY cannot import torch (install python3-torch)" >&2
    exit 1
  fi
  need=()
  for pkg in libtorch-dev cmake libopenmpi-dev openmpi-bin; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
  done
  if (( ${#need[@]} )); then
    echo "installing ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
  fi
  [[ -x "$VENV/bin/python" ]] || "$PY" -m venv --system-site-packages "$VENV"
  "$VENV/bin/python" -c "import wheel" 2>/dev/null || "$VENV/bin/pip" install -q wheel
  # The build must see Debian's torch (system site packages), so no build
  # isolation; gloo and the frameworks not measured are left out.
  MAKEFLAGS="${MAKEFLAGS:--j$(nproc)}" \
  HOROVOD_WITH_MPI=1 HOROVOD_WITH_PYTORCH=1 HOROVOD_WITHOUT_TENSORFLOW=1 \
  HOROVOD_WITHOUT_MXNET=1 HOROVOD_WITHOUT_GLOO=1 HOROVOD_CPU_OPERATIONS=MPI \
    "$VENV/bin/pip" install --no-cache-dir --no-build-isolation \
      "horovod==$VERSION"
  usable || { echo "error: horovod built but does not import with MPI" >&2; exit 1; }
fi
"$VENV/bin/horovodrun" --check-build
