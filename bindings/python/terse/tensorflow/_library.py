"""Loads terse's TensorFlow op library (_terse_tf_ops.so) once.

The op library links libterse.so, the process's one engine, which the
native module `_terse` links too. `_terse` is imported first: that loads
libterse.so (and Debian's protobuf and abseil it uses) on its own, before
TensorFlow's op loader brings in the op library next to TensorFlow's
framework library, whose bundled protobuf must not be the one libterse.so
binds to.

Where the op library is looked for, in order: beside the `terse` package
(where `pip install .` puts it), in `bindings/tensorflow` of the tree this
package lives in (Bazel runfiles), and in that tree's
`bazel-bin/bindings/tensorflow` (a source checkout after
`bazel build //bindings/tensorflow:_terse_tf_ops.so`).
"""

import os
import threading

import tensorflow as tf

from terse._native import lib

_FILE = "_terse_tf_ops.so"
_HERE = os.path.dirname(os.path.abspath(__file__))
_PACKAGE = os.path.dirname(_HERE)
_TREE = os.path.dirname(os.path.dirname(os.path.dirname(_PACKAGE)))

_lock = threading.Lock()
_ops = None


def candidate_paths():
    """Where the op library may be, most specific first."""
    return [
        os.path.join(_PACKAGE, _FILE),
        os.path.join(os.path.dirname(os.path.dirname(_PACKAGE)), "tensorflow",
                     _FILE),
        os.path.join(_TREE, "bazel-bin", "bindings", "tensorflow", _FILE),
    ]


def ops():
    """The loaded op module (terse_allreduce, terse_allgather, ...)."""
    global _ops
    if _ops is not None:
        return _ops
    with _lock:
        if _ops is None:
            lib()  # libterse.so first; see the module docstring.
            _ops = _load()
    return _ops


def _load():
    errors = []
    for path in candidate_paths():
        if os.path.exists(path):
            try:
                return tf.load_op_library(path)
            except (tf.errors.NotFoundError, OSError) as e:
                errors.append(f"{path}: {e}")
    raise ImportError(
        "terse's TensorFlow op library is not built or not found (looked in "
        + ", ".join(candidate_paths())
        + ("; " + "; ".join(errors) if errors else "")
        + "). Build it with `bazel build //bindings/tensorflow:_terse_tf_ops.so`"
        " after tools/setup_tf.sh, or install terse with `pip install .` "
        "from the TensorFlow environment.")
