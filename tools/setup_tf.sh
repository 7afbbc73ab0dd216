#!/bin/bash
# Creates terse's TensorFlow environment, idempotently: a virtual environment
# at /opt/terse-tf-venv over Debian's /usr/bin/python3 (3.11) that sees the
# system site-packages (Debian's numpy 1.24) and holds tensorflow-cpu 2.15.1
# with the pinned packages of tools/tf_requirements.txt, from PyPI.
#
# The path is fixed: WORKSPACE's @tensorflow repository (the headers and
# libtensorflow_framework the op library //bindings/tensorflow builds
# against) points into it. Does nothing when the environment already imports
# the pinned TensorFlow.
#
#   tools/setup_tf.sh          # create or check
#   tools/setup_tf.sh --force  # recreate from scratch
set -euo pipefail

# TERSE_TF_VENV only for trying the script elsewhere: the build needs
# /opt/terse-tf-venv.
VENV=${TERSE_TF_VENV:-/opt/terse-tf-venv}
TF_VERSION=2.15.1
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REQUIREMENTS="$HERE/tf_requirements.txt"

if [ "${1:-}" = "--force" ]; then
  rm -rf "$VENV"
fi

ready() {
  [ -x "$VENV/bin/python" ] &&
    [ -e "$VENV/lib/python3.11/site-packages/tensorflow/libtensorflow_framework.so.2" ] &&
    "$VENV/bin/python" - "$TF_VERSION" <<'PY' 2>/dev/null
import importlib.metadata, sys
sys.exit(importlib.metadata.version("tensorflow-cpu") != sys.argv[1])
PY
}

if ready; then
  echo "setup_tf: $VENV has tensorflow-cpu $TF_VERSION" >&2
  exit 0
fi

# Debian's venv module (ensurepip) lives in python3-venv.
if ! /usr/bin/python3 -c "import ensurepip" 2>/dev/null; then
  echo "setup_tf: installing python3-venv" >&2
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq \
    --no-install-recommends python3-venv >/dev/null
fi

echo "setup_tf: creating $VENV with tensorflow-cpu $TF_VERSION" >&2
/usr/bin/python3 -m venv --system-site-packages "$VENV"
"$VENV/bin/pip" install --no-input --disable-pip-version-check -q \
  -r "$REQUIREMENTS"

if ! ready; then
  echo "setup_tf: $VENV does not import tensorflow-cpu $TF_VERSION" >&2
  exit 1
fi
echo "setup_tf: ready" >&2
