"""Loads terse's native extensions once each, on first use.

`_terse` (the engine binding, lib()) and `_efcp` (the EFCP preconditioners
behind terse.optim, efcp()). Where extension NAME is looked for, in order:
  1. beside this package (`terse/NAME*.so`, where `pip install .` puts it);
  2. as a top-level module NAME on sys.path (a Bazel build's runfiles:
     `bindings/python` holds both `terse/` and `NAME.so`);
  3. the Bazel output of the source checkout this package lives in
     (`bazel-bin/bindings/python/NAME.so`), so PYTHONPATH=bindings/python
     works after `bazel build //bindings/python:NAME.so`;
  4. an installed copy (`terse/NAME*.so`) elsewhere on sys.path, for a
     source tree on PYTHONPATH in front of a `pip install`ed terse.
"""

import glob
import importlib
import importlib.util
import os
import sys
import threading

_HERE = os.path.dirname(os.path.abspath(__file__))


class _Extension:
    """One native module, imported on first use (thread-safe)."""

    def __init__(self, name, what):
        self._name = name
        self._what = what
        self._lock = threading.Lock()
        self._module = None

    def get(self):
        if self._module is not None:
            return self._module
        with self._lock:
            if self._module is None:
                self._module = self._import()
        return self._module

    def _candidate_files(self):
        checkout = os.path.dirname(os.path.dirname(os.path.dirname(_HERE)))
        yield os.path.join(checkout, "bazel-bin", "bindings", "python",
                           f"{self._name}.so")
        for entry in sys.path:
            if entry and os.path.abspath(entry) != os.path.dirname(_HERE):
                yield from sorted(glob.glob(os.path.join(
                    entry, "terse", f"{self._name}*.so")))

    def _load_file(self, path):
        spec = importlib.util.spec_from_file_location(self._name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[self._name] = module
        return module

    def _import(self):
        errors = []
        for name in (f"terse.{self._name}", self._name):
            try:
                return importlib.import_module(name)
            except ImportError as e:
                errors.append(f"{name}: {e}")
        for path in self._candidate_files():
            if os.path.exists(path):
                try:
                    return self._load_file(path)
                except ImportError as e:
                    errors.append(f"{path}: {e}")
        raise ImportError(
            f"terse's native module {self._name} ({self._what}) is not built "
            "or not found (" + "; ".join(errors) + "). Build it with "
            f"`bazel build //bindings/python:{self._name}.so` (then "
            "PYTHONPATH=bindings/python finds it), or install with "
            "`/usr/bin/python3 -m pip install --no-build-isolation "
            "--break-system-packages .`")


_TERSE = _Extension("_terse", "the engine binding")
_EFCP = _Extension("_efcp", "the EFCP preconditioners of terse.optim")


def lib():
    """The `_terse` extension module; ImportError with a fix if missing."""
    return _TERSE.get()


def efcp():
    """The `_efcp` extension module; ImportError with a fix if missing."""
    return _EFCP.get()


def check_initialized(what):
    """Raises TerseError naming init() when the engine is not running."""
    if not lib().is_initialized():
        raise lib().TerseError(
            f"terse is not initialised; call init() first (before {what})")
