"""Loads the native extension `_terse` once, on first use.

Where it is looked for, in order:
  1. beside this package (`terse/_terse*.so`, where `pip install .` puts it);
  2. as a top-level module `_terse` on sys.path (a Bazel build's runfiles:
     `bindings/python` holds both `terse/` and `_terse.so`);
  3. the Bazel output of the source checkout this package lives in
     (`bazel-bin/bindings/python/_terse.so`), so PYTHONPATH=bindings/python
     works after `bazel build //bindings/python:_terse.so`;
  4. an installed copy (`terse/_terse*.so`) elsewhere on sys.path, for a
     source tree on PYTHONPATH in front of a `pip install`ed terse.
"""

import glob
import importlib
import importlib.util
import os
import sys
import threading

_lock = threading.Lock()
_module = None

_HERE = os.path.dirname(os.path.abspath(__file__))


def lib():
    """The `_terse` extension module; ImportError with a fix if missing."""
    global _module
    if _module is not None:
        return _module
    with _lock:
        if _module is None:
            _module = _import()
    return _module


def _candidate_files():
    checkout = os.path.dirname(os.path.dirname(os.path.dirname(_HERE)))
    yield os.path.join(checkout, "bazel-bin", "bindings", "python",
                       "_terse.so")
    for entry in sys.path:
        if entry and os.path.abspath(entry) != os.path.dirname(_HERE):
            yield from sorted(glob.glob(os.path.join(entry, "terse",
                                                     "_terse*.so")))


def _load_file(path):
    spec = importlib.util.spec_from_file_location("_terse", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules["_terse"] = module
    return module


def _import():
    errors = []
    for name in ("terse._terse", "_terse"):
        try:
            return importlib.import_module(name)
        except ImportError as e:
            errors.append(f"{name}: {e}")
    for path in _candidate_files():
        if os.path.exists(path):
            try:
                return _load_file(path)
            except ImportError as e:
                errors.append(f"{path}: {e}")
    raise ImportError(
        "terse's native module _terse is not built or not found ("
        + "; ".join(errors) + "). Build it with "
        "`bazel build //bindings/python:_terse.so` (then "
        "PYTHONPATH=bindings/python finds it), or install with "
        "`/usr/bin/python3 -m pip install --no-build-isolation "
        "--break-system-packages .`")
