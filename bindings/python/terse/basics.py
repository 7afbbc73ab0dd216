"""Process-wide engine control shared by every framework binding.

init() starts the one engine of this process from the TERSE_* environment
(plus overrides), shutdown() stops it (also at interpreter exit, so MPI is
finalised before the process ends). Every query raises TerseError before
init() with a message that names init().
"""

import array
import atexit
import operator
import os
import threading
import warnings

from terse._native import check_initialized, lib  # noqa: F401 (re-exported)
from terse import process_sets as _process_sets
from terse.compression import Compression, Compressor

_lock = threading.Lock()
# The TERSE_* variables the running engine was started with (None: not
# running). Written only under _lock by init()/shutdown().
_engine_variables = None
# The static process sets' ranks and the dynamic flag init() was given.
_engine_sets = None
# What init(comm=...) runs on: None (MPI_COMM_WORLD), ("ranks", tuple) or
# ("mpi", the communicator's handle).
_engine_world = None
# Every rank's (local_rank, local_size), gathered once per init() (None: not
# yet). Written only under _lock.
_host_layout = None


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


def _world(comm):
    """init(comm=...): (world ranks, mpi4py communicator or None, key that
    tells two comm= values apart: None for MPI_COMM_WORLD)."""
    if comm is None:
        return [], None, None
    if isinstance(comm, (list, tuple, range)):
        try:
            ranks = [operator.index(r) for r in comm]
        except TypeError:
            raise TypeError(
                f"init(comm={comm!r}): a rank list holds ints (ranks of "
                "MPI_COMM_WORLD)") from None
        if not ranks:
            raise ValueError(
                "init(comm=[]): the rank list is empty; list the "
                "MPI_COMM_WORLD ranks to run on, or pass comm=None for all")
        return ranks, None, ("ranks", tuple(ranks))
    if _process_sets.is_mpi4py_object(comm):
        from mpi4py import MPI
        if isinstance(comm, MPI.Comm):
            if comm == MPI.COMM_NULL:
                raise ValueError(
                    "init(comm=MPI.COMM_NULL): this process is in no such "
                    "communicator; pass the one it is in")
            handle = MPI._handleof(comm)
            if handle == MPI._handleof(MPI.COMM_WORLD):
                return [], None, None  # What comm=None runs on.
            return [], comm, ("mpi", handle)
    raise TypeError(
        "init(comm=...) takes None, a list of MPI_COMM_WORLD ranks or an "
        f"mpi4py communicator (mpi4py.MPI.Comm), not {type(comm).__name__}")


def _comm_address(mpi_comm):
    """The address of mpi4py communicator `mpi_comm`'s MPI_Comm handle (0:
    MPI_COMM_WORLD), valid while the object lives."""
    if mpi_comm is None:
        return 0
    from mpi4py import MPI
    return MPI._addressof(mpi_comm)


def init(compression=None, config=None, comm=None, process_sets=None):
    """Starts terse: MPI (unless the application did), the background thread.

    compression: a Compressor or name for the whole process; overrides
        TERSE_COMPRESSION (and TERSE_CF when it carries a CF).
    config: {"TERSE_...": value} overrides of the environment.
    comm: Horovod's: None for MPI_COMM_WORLD; a list of MPI_COMM_WORLD
        ranks to run on (any order: rank i is comm[i]; every listed process
        passes the same list, a process not in it gets TerseError naming its
        rank); or an mpi4py communicator, which terse duplicates. Collective
        over those processes only; rank(), size(), local_rank(),
        local_size(), cross_*() and process set ranks are then those of
        that world. Anything else raises TypeError.
    process_sets: Horovod's static process sets (a list of ProcessSet, ids
        1, 2, ... in order) or "dynamic" (add_process_set/remove_process_set
        allowed, as with TERSE_DYNAMIC_PROCESS_SETS=1); terse.process_sets.
        With comm, their ranks are ranks of that world, so ProcessSet(an
        mpi4py communicator), whose ranks are MPI_COMM_WORLD's, raises
        ProcessSetsNotSupportedError.
    A second call with the same settings does nothing; with different ones it
    raises TerseError. A bad TERSE_* value raises TerseError naming it.
    """
    global _engine_variables, _engine_sets, _engine_world
    world_ranks, mpi_comm, world = _world(comm)
    if world is not None and isinstance(process_sets, (list, tuple)) and any(
            isinstance(ps, _process_sets.ProcessSet) and ps.mpi_comm is not None
            for ps in process_sets):
        raise _process_sets.not_supported_error()(
            "init(comm=..., process_sets=[ProcessSet(communicator), ...]): "
            "a communicator's ranks are MPI_COMM_WORLD's, not those of the "
            "world comm= makes; pass ProcessSet(list of ranks of that "
            "world)")
    static, dynamic = _process_sets.static_sets(process_sets)
    variables = _collect_variables(compression, config)
    # The engine's config table validates the value (a bad one fails init
    # naming the variable); these are the words it reads as on.
    if variables.get("TERSE_DYNAMIC_PROCESS_SETS", "off") in ("on", "true",
                                                              "1"):
        dynamic = True
    settings = (variables, ([ps.ranks for ps in static], dynamic), world)
    with _lock:
        if lib().is_initialized():
            if (_engine_variables, _engine_sets, _engine_world) == settings:
                return
            raise lib().TerseError(
                "terse is already initialised with other settings; call "
                "shutdown() before init() with new ones")
        lib().init(variables, [ps.ranks for ps in static], world_ranks,
                   _comm_address(mpi_comm))
        _process_sets.on_init(static, dynamic)
        _engine_variables, _engine_sets, _engine_world = settings
        _last_init[:] = [variables, static, dynamic, world_ranks, mpi_comm,
                         world]
        _gather_host_layout_locked()
    _register_exit_hook()


# The last successful init's (variables, static ProcessSets, dynamic, world
# ranks, mpi4py communicator, world key); holding the communicator keeps its
# handle alive for reinit().
_last_init = []


def engine_error():
    """The error the engine stopped with (a failed collective, a stall past
    TERSE_STALL_SHUTDOWN_SECONDS, ...): its message, or None while the
    engine runs or terse is not initialised. After one, every op fails until
    shutdown() and init() again (reinit())."""
    return lib().fatal_status()


def reinit():
    """Elastic's reset (Horovod's shutdown(); init()): stops terse and starts
    it again with the last init's settings; its static process sets are
    registered again with the same ids, so ProcessSet objects held by the
    application work again (sets added by add_process_set are not).
    Collective over every rank of that init's world (comm=...): the same
    ranks, or the same communicator (TerseError if the application freed
    it). TerseError if terse was never initialised.
    """
    global _engine_variables, _engine_sets, _engine_world
    with _lock:
        if not _last_init:
            raise lib().TerseError("reinit(): terse was never initialised")
        variables, static, dynamic, world_ranks, mpi_comm, world = _last_init
    try:
        shutdown()
    except lib().TerseError:
        pass  # The root cause the engine stopped with, raised already.
    with _lock:
        lib().init(variables, [ps.ranks for ps in static], world_ranks,
                   _comm_address(mpi_comm))
        _process_sets.on_init(static, dynamic, again=True)
        _engine_variables = variables
        _engine_sets = ([ps.ranks for ps in static], dynamic)
        _engine_world = world
        _gather_host_layout_locked()


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
    global _engine_variables, _host_layout
    with _lock:
        try:
            lib().shutdown()  # Raises the root cause the engine stopped on.
        finally:
            _process_sets.on_shutdown()
            _engine_variables = None
            _host_layout = None


def is_initialized():
    return lib().is_initialized()


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


def _gather_host_layout_locked():
    """Allgathers every rank's (local_rank, local_size) through the engine.

    Collective: init() runs it on every rank right after starting the
    engine. Caller holds _lock."""
    global _host_layout
    mine = array.array("q", [lib().local_rank(), lib().local_size()])
    address, _ = mine.buffer_info()
    handle = lib().allgather_async("terse.init.host_layout", address, 2,
                                   lib().DTYPES["i64"], -1, [1, 2])
    lib().wait(handle)
    result = lib().take_allgather(handle)
    gathered = array.array("q", bytes(result.nbytes))
    out_address, _ = gathered.buffer_info()
    result.copy_to(out_address, result.nbytes)
    _host_layout = [(gathered[2 * r], gathered[2 * r + 1])
                    for r in range(len(gathered) // 2)]


def _layout():
    """Every rank's (local_rank, local_size). If the engine was started
    through another binding (not init() here), the first call gathers it:
    then it is collective, so call it on every rank."""
    check_initialized("cross_rank()/cross_size()/is_homogeneous()")
    with _lock:
        if _host_layout is None:
            _gather_host_layout_locked()
        return _host_layout


def cross_rank():
    """This rank's index among the ranks with its local_rank() (one per
    host in a homogeneous job): Horovod's rank in the cross communicator,
    which splits the world by local rank."""
    layout = _layout()
    me = rank()
    mine = layout[me][0]
    return sum(1 for r in range(me) if layout[r][0] == mine)


def cross_size():
    """How many ranks share this rank's local_rank(): the number of hosts in
    a homogeneous job."""
    layout = _layout()
    mine = layout[rank()][0]
    return sum(1 for local, _ in layout if local == mine)


def is_homogeneous():
    """True when every host runs the same number of ranks."""
    return len({local_size for _, local_size in _layout()}) == 1


def mpi_threads_supported():
    """True when MPI provides MPI_THREAD_MULTIPLE (MPI_Query_thread).

    terse itself makes every MPI call from its one background thread, so it
    needs no more than MPI_THREAD_SERIALIZED; this reports what MPI gave."""
    check_initialized("mpi_threads_supported()")
    return lib().mpi_thread_level() == lib().MPI_THREAD_MULTIPLE


def mpi_enabled():
    """True while the engine runs: terse's CPU collectives and control plane
    are always MPI (there is no Gloo controller)."""
    return lib().is_initialized()


def mpi_built():
    """True: terse is always built with MPI."""
    return bool(lib().build_flags()["mpi"])


def gloo_enabled():
    """False: terse has no Gloo backend."""
    return False


def gloo_built():
    """False: terse has no Gloo backend."""
    return False


def nccl_built():
    """The NCCL version code this build links (e.g. 22800 for 2.28.0), 0 when
    none loads: truthy exactly when NCCL is usable, as Horovod's."""
    return int(lib().build_flags()["nccl_version"])


def cuda_built():
    """True when this build's CUDA runtime loads (the GPU path is compiled
    in; whether a device answers is build_info()'s 'gpu' line)."""
    return lib().build_flags()["cuda_runtime_version"] > 0


def rocm_built():
    """False: terse has no ROCm build."""
    return False


def ddl_built():
    """False: terse has no IBM DDL backend."""
    return False


def ccl_built():
    """False: terse has no oneCCL backend."""
    return False


def start_timeline(file_path, mark_cycles=False):
    """Starts writing a Chrome-trace timeline to `file_path` (Horovod's
    start_timeline): rank 0 writes it, or every rank its own when the path
    holds "{rank}" (as TERSE_TIMELINE). Not collective. Raises TerseError
    while a timeline is being written (stop_timeline() first) or if the file
    cannot be opened. mark_cycles=True raises: terse's timeline has no
    negotiation-cycle markers."""
    check_initialized("start_timeline()")
    if mark_cycles:
        raise lib().TerseError(
            "start_timeline(mark_cycles=True): terse's timeline has no cycle "
            "markers; pass mark_cycles=False")
    lib().start_timeline(os.fspath(file_path))


def stop_timeline():
    """Completes the timeline being written (the file is then a complete
    JSON document); does nothing when none is. start_timeline() may follow."""
    check_initialized("stop_timeline()")
    lib().stop_timeline()


def barrier(process_set=None):
    """Blocks until every rank (of `process_set`, terse.process_sets; None:
    every rank) has called barrier()."""
    check_initialized("barrier()")
    lib().barrier(_process_sets.resolve(process_set, "barrier()"))


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
    compressor (what it sent; "none" = dense), cf, bytes_sent, steps and
    process_set (the id of the bucket's process set, 0: global). Every
    process set this rank is in is covered, the global set's buckets
    first."""
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
    momentum-correction velocities, Accordion's accumulators, of every
    process set this rank is in (keyed by set id and ranks). Residuals
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
    TerseError naming the problem and leaves the current state unchanged;
    so does a state saved while this rank was in other process sets (ids
    and ranks) than now."""
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


def check_extension(ext_name, ext_env_var, pkg_path, *args):
    """Horovod's build check (`check_extension('horovod.torch',
    'HOROVOD_WITH_PYTORCH', __file__, 'mpi_lib_v2')`): raises ImportError
    when terse's native engine module (`_terse`, the one every framework
    binding uses) cannot be loaded. `ext_name` and `ext_env_var` name the
    extension in the error; `pkg_path` and the rest locate Horovod's
    per-framework libraries, which terse does not have (its one module is
    found as terse/_native.py says), so they are not used."""
    try:
        lib()
    except ImportError as e:
        raise ImportError(
            f"Extension {ext_name} has not been built: terse's native "
            f"module _terse does not load ({e}). Build it with "
            "tools/setup.sh (or `bazel build //bindings/python:_terse.so`); "
            f"{ext_env_var} plays no part in terse's build") from e


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
           "build_info", "check_extension",
           "cross_rank", "cross_size", "is_homogeneous",
           "mpi_threads_supported", "mpi_enabled", "mpi_built",
           "gloo_enabled", "gloo_built", "nccl_built", "cuda_built",
           "rocm_built", "ddl_built", "ccl_built",
           "start_timeline", "stop_timeline",
           "Compressor"]


def resolve_average(op, average, stacklevel=2):
    """The reduce op meant by Horovod's (op, average) pair, as Horovod
    0.28.1's handle_average_backwards_compatibility: `average` is the
    deprecated spelling (True: Average, False: Sum, with a
    DeprecationWarning attributed `stacklevel` frames up); both given is a
    ValueError; neither is Average. Shared by terse.torch and
    terse.tensorflow."""
    if op is not None:
        if average is not None:
            raise ValueError("The op parameter supersedes average. Please "
                             "provide only one of them.")
        return op
    if average is not None:
        warnings.warn("Parameter `average` has been replaced with `op` and "
                      "will be removed in v1.0", DeprecationWarning,
                      stacklevel=stacklevel + 1)
        return lib().OP_AVERAGE if average else lib().OP_SUM
    return lib().OP_AVERAGE
