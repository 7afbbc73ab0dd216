"""Process-wide engine control shared by every framework binding.

init() starts the one engine of this process from the TERSE_* environment
(plus overrides), shutdown() stops it (also at interpreter exit, so MPI is
finalised before the process ends). Every query raises TerseError before
init() with a message that names init().
"""

import atexit
import os
import threading

from terse._native import lib
from terse.compression import Compression, Compressor

_lock = threading.Lock()
# The TERSE_* variables the running engine was started with (None: not
# running). Written only under _lock by init()/shutdown().
_engine_variables = None


def _collect_variables(compression=None, config=None):
    variables = {k: v for k, v in os.environ.items() if k.startswith("TERSE_")}
    for key, value in (config or {}).items():
        if not key.startswith("TERSE_"):
            raise ValueError(f"config key {key!r} is not a TERSE_* variable")
        variables[key] = str(value)
    if compression is not None:
        choice = Compression.get(compression)
        variables["TERSE_COMPRESSION"] = choice.name
        if choice.cf is not None:
            variables["TERSE_CF"] = f"{choice.cf:g}"
    return variables


def init(compression=None, config=None):
    """Starts terse: MPI (unless the application did), the background thread.

    compression: a Compressor or name for the whole process; overrides
        TERSE_COMPRESSION (and TERSE_CF when it carries a CF).
    config: {"TERSE_...": value} overrides of the environment.
    A second call with the same settings does nothing; with different ones it
    raises TerseError. A bad TERSE_* value raises TerseError naming it.
    """
    global _engine_variables
    variables = _collect_variables(compression, config)
    with _lock:
        if lib().is_initialized():
            if _engine_variables == variables:
                return
            raise lib().TerseError(
                "terse is already initialised with other settings; call "
                "shutdown() before init() with new ones")
        lib().init(variables)
        _engine_variables = variables
    _register_exit_hook()


_exit_hook_registered = threading.Event()


def _register_exit_hook():
    if not _exit_hook_registered.is_set():
        _exit_hook_registered.set()
        atexit.register(_shutdown_at_exit)


def _shutdown_at_exit():
    try:
        shutdown()
    except Exception:  # The process is ending; the error was reported.
        pass


def shutdown():
    """Stops terse; pending operations fail. Safe to call more than once."""
    global _engine_variables
    with _lock:
        lib().shutdown()
        _engine_variables = None


def is_initialized():
    return lib().is_initialized()


def check_initialized(what):
    """Raises TerseError naming init() when the engine is not running."""
    if not lib().is_initialized():
        raise lib().TerseError(
            f"terse is not initialised; call init() first (before {what})")


def rank():
    """This process's rank in [0, size())."""
    return lib().rank()


def size():
    """The number of ranks."""
    return lib().size()


def local_rank():
    """This process's rank among the ranks on its host."""
    return lib().local_rank()


def local_size():
    """The number of ranks on this process's host."""
    return lib().local_size()


def barrier():
    """Blocks until every rank has called barrier()."""
    check_initialized("barrier()")
    lib().barrier()


def join():
    """This rank has no more data; returns the last rank to join.

    Until every rank has joined, this rank contributes zeros to the other
    ranks' allreduces, so ranks with uneven data do not hang.
    """
    check_initialized("join()")
    return lib().join()


def bucket_reports():
    """What every fused bucket did on its last step, as the engine reports
    it: a list of dicts with bucket, tensors, bytes (dense), policy,
    compressor (what it sent; "none" = dense), cf, bytes_sent, steps."""
    check_initialized("bucket_reports()")
    return lib().bucket_reports()


def bytes_sent():
    """Bytes this rank has sent for reductions since init()."""
    check_initialized("bytes_sent()")
    return lib().bytes_sent()


def notify_learning_rate_drop():
    """Tells the compression policies the learning rate was just lowered
    (Accordion switches to its low CF). DistributedOptimizer calls it when a
    parameter group's learning rate falls by 10% or more in one step."""
    check_initialized("notify_learning_rate_drop()")
    lib().notify_learning_rate_drop()


def save_compression_state(path=None):
    """This rank's compression state: policies, error-feedback residuals,
    momentum-correction velocities, Accordion's accumulators. Residuals
    differ between ranks.

    path=None: returns it as bytes. path (str or os.PathLike): streams it to
    that file instead (of any size; written to path + '.tmp', then renamed,
    so a crash never leaves a half-written file under `path`) and returns
    None."""
    check_initialized("save_compression_state()")
    if path is None:
        return lib().save_compression_state()
    lib().save_compression_state_to_file(os.fspath(path))
    return None


def load_compression_state(state):
    """Restores a state save_compression_state() produced on this rank.

    state: the bytes it returned (bytes-like), or the path (str or
    os.PathLike) of the file it wrote. A truncated or corrupt state raises
    TerseError naming the problem and leaves the current state unchanged."""
    check_initialized("load_compression_state()")
    if isinstance(state, (str, os.PathLike)):
        lib().load_compression_state_from_file(os.fspath(state))
    else:
        lib().load_compression_state(bytes(state))


def engine_compression():
    """The process-wide Compressor the engine was started with."""
    variables = _engine_variables
    if variables is None:
        check_initialized("engine_compression()")
        variables = _collect_variables()
    return Compression.from_env(variables)


def momentum_correction():
    """The running engine's TERSE_MOMENTUM_CORRECTION (0.0: off)."""
    variables = _engine_variables
    if variables is None:
        variables = _collect_variables()
    try:
        return float(variables.get("TERSE_MOMENTUM_CORRECTION", "0"))
    except ValueError:  # init() has rejected it already.
        return 0.0


def compression_arg(choice):
    """The per-tensor compression string for the native module.

    None, or the choice the engine already applies process-wide, is "" (the
    engine's policy); anything else is 'name[:cf]'.
    """
    if choice is None:
        return ""
    choice = Compression.get(choice)
    engine = engine_compression()
    if choice.name == engine.name and choice.cf in (None, engine.cf):
        return ""
    return choice.spec()


def compression_spec(choice):
    """The per-call compression spec for the engine: "" for None (the
    engine's policy: TERSE_COMPRESSION / TERSE_COMPRESSION_RULES), else the
    choice's 'name[:cf]'. An explicit choice wins over the name rules, also
    when it equals the process-wide policy."""
    if choice is None:
        return ""
    return Compression.get(choice).spec()


def build_info(variables=None):
    """What terse_info prints for this build and configuration."""
    if variables is None:
        variables = _collect_variables()
    return lib().build_info(dict(variables))


__all__ = ["init", "shutdown", "is_initialized", "check_initialized", "rank",
           "size", "local_rank", "local_size", "barrier", "join",
           "bucket_reports", "bytes_sent", "notify_learning_rate_drop",
           "save_compression_state", "load_compression_state",
           "momentum_correction",
           "engine_compression", "compression_arg", "compression_spec",
           "build_info",
           "Compressor"]
