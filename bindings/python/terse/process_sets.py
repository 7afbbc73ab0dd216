"""Horovod's process sets: ProcessSet, global_process_set, add/remove.

A process set is a sorted list of world ranks that runs collectives among
themselves; the engine gives each its own negotiation and buckets (ops on
different sets never fuse) and an id, 0 for global_process_set (every
rank). As in Horovod 0.28.1:

  * static sets: init(process_sets=[ProcessSet([0, 1]), ...]) registers
    them on every rank (ids 1, 2, ... in that order);
  * dynamic sets: add_process_set(ranks) / remove_process_set(ps), collective
    over EVERY rank (members or not), in the same order everywhere; allowed
    only with TERSE_DYNAMIC_PROCESS_SETS=1 (or init(process_sets="dynamic")),
    else ValueError as Horovod's;
  * an op takes process_set=...; only the set's members may call it; a
    broadcast's root_rank is a world rank in the set;
  * ProcessSet.rank() is the rank within the set, size() its number of
    ranks, included() whether this process is in it; all None before the set
    is registered.

ProcessSet(comm) takes an mpi4py communicator (Horovod's other form): its
world ranks are read from the communicator's group (MPI_COMM_WORLD is
terse's world). In init(process_sets=[...]) each process passes the
communicator it is in (e.g. from COMM_WORLD.Split); every process's sets are
exchanged over MPI_COMM_WORLD, so the sets of every process are registered,
in list position order and, within a position, in order of the lowest world
rank that passed them; a ProcessSet whose ranks are registered already gets
that set's id, one of every rank is the global set (id 0). Without mpi4py,
ProcessSet(comm) raises ProcessSetsNotSupportedError naming what is
missing. As in Horovod, add_process_set() takes rank lists only. With
init(comm=...), set ranks are ranks of the world comm= makes, so
ProcessSet(comm) there raises ProcessSetsNotSupportedError.
"""

import sys
import threading

from terse._native import check_initialized, lib


def _error_class():
    base = lib().TerseError

    class ProcessSetsNotSupportedError(base, NotImplementedError):
        """A process set terse cannot make (from an MPI communicator). Both
        a TerseError and a NotImplementedError."""

    ProcessSetsNotSupportedError.__module__ = "terse"
    return ProcessSetsNotSupportedError


_lock = threading.Lock()
_error = []
# The sets registered with the running engine, by id (0 excluded), and
# whether dynamic changes are allowed.
_registered = {}
_dynamic = [False]


def not_supported_error():
    """The ProcessSetsNotSupportedError class (made once, on first use, so
    this module imports without the native module)."""
    with _lock:
        if not _error:
            _error.append(_error_class())
        return _error[0]


def is_mpi4py_object(obj):
    """Whether obj's type comes from mpi4py (tells without importing it)."""
    return type(obj).__module__.split(".")[0] == "mpi4py"


def _mpi():
    """mpi4py.MPI; ProcessSetsNotSupportedError naming what is missing when
    this Python cannot import it."""
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise not_supported_error()(
            "ProcessSet(communicator) needs mpi4py, which this Python "
            f"({sys.executable}) cannot import ({e}); install mpi4py (Debian: "
            "python3-mpi4py) or pass ProcessSet(list of world ranks)"
        ) from None
    return MPI


def _comm_world_ranks(comm):
    """The sorted MPI_COMM_WORLD ranks of mpi4py communicator `comm`."""
    MPI = _mpi()
    if not isinstance(comm, MPI.Comm):
        raise ValueError("ProcessSet should be initialized with a list of "
                         "process ranks or an mpi4py Comm object, not "
                         f"{type(comm).__name__}")
    if comm == MPI.COMM_NULL:
        raise ValueError("ProcessSet(MPI.COMM_NULL): this process is in no "
                         "such communicator; pass the one it is in")
    if comm.Is_inter():
        raise ValueError("ProcessSet(comm): an intercommunicator has no "
                         "single set of ranks; pass an intracommunicator")
    group, world = comm.Get_group(), MPI.COMM_WORLD.Get_group()
    try:
        ranks = MPI.Group.Translate_ranks(group, list(range(group.Get_size())),
                                          world)
    finally:
        group.Free()
        world.Free()
    if any(r == MPI.UNDEFINED for r in ranks):
        raise ValueError("ProcessSet(comm): the communicator holds processes "
                         "outside MPI_COMM_WORLD, terse's world")
    return sorted(int(r) for r in ranks)



class ProcessSet:
    """A set of world ranks that runs collectives together (Horovod's API).

    ProcessSet(ranks): ranks is a list of world ranks (sorted here).
    process_set_id is None until the set is registered (init or
    add_process_set), 0 for global_process_set (whose ranks are every rank
    while terse runs)."""

    def __init__(self, ranks_or_comm=None):
        self.mpi_comm = None
        self.process_set_id = None
        if is_mpi4py_object(ranks_or_comm):
            self.ranks = _comm_world_ranks(ranks_or_comm)
            self.mpi_comm = ranks_or_comm
            return
        if ranks_or_comm is not None and not isinstance(
                ranks_or_comm, (list, tuple, range)):
            raise ValueError(
                "ProcessSet should be initialized with a list of process "
                "ranks or an mpi4py Comm object, not "
                f"{type(ranks_or_comm).__name__}")
        self.ranks = (None if ranks_or_comm is None
                      else sorted(int(r) for r in ranks_or_comm))
        if self.ranks is not None and len(set(self.ranks)) != len(self.ranks):
            raise ValueError(f"ProcessSet({list(ranks_or_comm)}): a rank is "
                             "listed twice")

    def _is_global(self):
        if self is global_process_set or self.process_set_id == 0:
            return True
        return (self.ranks is not None and lib().is_initialized()
                and self.ranks == list(range(lib().size())))

    def _world_ranks(self):
        if self._is_global():
            return list(range(lib().size()))
        return self.ranks

    def size(self):
        """The number of ranks in the set (None before registration)."""
        if self._is_global():
            return lib().size()
        if self.process_set_id is None:
            return None
        return len(self.ranks)

    def rank(self):
        """This process's rank within the set (None before registration);
        ValueError when this process is not in it."""
        if self._is_global():
            return lib().rank()
        if self.process_set_id is None:
            return None
        me = lib().rank()
        if me not in self.ranks:
            raise ValueError(f"rank {me} is not part of process set "
                             f"{self.process_set_id} (ranks {self.ranks})")
        return self.ranks.index(me)

    def included(self):
        """Whether this process belongs to the set (None before
        registration)."""
        if self._is_global():
            return True
        if self.process_set_id is None:
            return None
        return lib().rank() in self.ranks

    def __eq__(self, other):
        if not isinstance(other, ProcessSet):
            return NotImplemented
        if self is other:
            return True
        if self._is_global() or other._is_global():
            return self._is_global() and other._is_global()
        return self.ranks == other.ranks

    def __hash__(self):
        return hash(0) if self._is_global() else hash(tuple(self.ranks or ()))

    def __repr__(self):
        if self is global_process_set:
            return "ProcessSet(process_set_id=0, global)"
        return (f"ProcessSet(process_set_id={self.process_set_id}, "
                f"ranks={self.ranks})")


global_process_set = ProcessSet()
global_process_set.process_set_id = 0


# Listed sets that share an already listed set's ranks (or are global):
# (alias, target) pairs given their ids by on_init; reset at shutdown.
_pending_aliases = []
_aliases = []
_last_aliases = []  # The last init's, for a re-init.


def _expand_comm_sets(listed):
    """static_sets' part for ProcessSet(comm): every process's communicator
    sets, exchanged over MPI_COMM_WORLD, in a list order every process
    computes alike; the aliases go to _pending_aliases."""
    comm_sets = [ps for ps in listed if ps.mpi_comm is not None]
    if not comm_sets:
        return listed
    MPI = _mpi()
    everyone = MPI.COMM_WORLD.allgather([ps.ranks for ps in comm_sets])
    counts = sorted({len(theirs) for theirs in everyone})
    if len(counts) != 1:
        raise ValueError(
            "init(process_sets=...): every process must list as many "
            "ProcessSet(comm) entries; the processes listed "
            f"{[len(theirs) for theirs in everyone]}")
    world = list(range(MPI.COMM_WORLD.Get_size()))
    out, by_ranks, j = [], {}, 0
    for ps in listed:
        if ps.mpi_comm is None:  # A rank list: as without communicators.
            out.append(ps)
            by_ranks.setdefault(tuple(ps.ranks), ps)
            continue
        candidates = [theirs[j] for theirs in everyone]
        j += 1
        for ranks in candidates:
            if ranks == world or tuple(ranks) in by_ranks:
                continue
            made = ps if ranks == ps.ranks else ProcessSet(ranks)
            by_ranks[tuple(ranks)] = made
            out.append(made)
        if ps.ranks == world:
            _pending_aliases.append((ps, global_process_set))
        elif by_ranks[tuple(ps.ranks)] is not ps:
            _pending_aliases.append((ps, by_ranks[tuple(ps.ranks)]))
    return out


def resolve(process_set, what):
    """The engine id of `process_set` for an op named `what`: 0 for None,
    global_process_set or a set of every rank; the registered id otherwise.
    TypeError for a non-ProcessSet, ValueError for an unregistered set or
    one this process is not in."""
    if process_set is None or process_set is global_process_set:
        return 0
    if not isinstance(process_set, ProcessSet):
        raise TypeError(f"{what}: process_set must be a ProcessSet, not "
                        f"{type(process_set).__name__}")
    if process_set.process_set_id is None:
        if process_set._is_global():
            return 0
        raise ValueError(
            f"{what}: process set {process_set.ranks} is not registered; "
            "pass it to init(process_sets=[...]) or add_process_set() first")
    if process_set.process_set_id != 0 and not process_set.included():
        raise ValueError(
            f"{what}: this rank ({lib().rank()}) is not in process set "
            f"{process_set.process_set_id} (ranks {process_set.ranks}); only "
            "its members may call it")
    return process_set.process_set_id


def size_of(process_set_id):
    """The number of ranks of registered set `process_set_id`."""
    if process_set_id == 0:
        return lib().size()
    with _lock:
        ps = _registered.get(process_set_id)
    return len(ps.ranks) if ps is not None else len(
        lib().process_set_ranks(process_set_id))


def rank_in(process_set_id):
    """This process's rank within registered set `process_set_id`."""
    if process_set_id == 0:
        return lib().rank()
    with _lock:
        ps = _registered.get(process_set_id)
    ranks = ps.ranks if ps is not None else lib().process_set_ranks(
        process_set_id)
    return ranks.index(lib().rank())


def registered(process_set_id):
    """The registered ProcessSet of id `process_set_id`; ValueError when
    there is none (it was removed)."""
    with _lock:
        ps = _registered.get(process_set_id)
    if ps is None:
        raise ValueError(f"process set {process_set_id} is not registered")
    return ps


def static_sets(process_sets):
    """init(process_sets=...): (list of ProcessSet to register, dynamic).
    None, [] or a list of ProcessSet / rank lists (global_process_set is
    skipped); "dynamic" allows add/remove at runtime."""
    if process_sets is None:
        return [], False
    if isinstance(process_sets, str):
        if process_sets != "dynamic":
            raise ValueError(f"init(process_sets={process_sets!r}): pass a "
                             "list of ProcessSet or 'dynamic'")
        return [], True
    out = []
    for ps in process_sets:
        if ps is global_process_set:
            continue
        if not isinstance(ps, ProcessSet):
            ps = ProcessSet(ps)
        if ps.ranks is None:
            continue
        if ps.process_set_id not in (None, 0):
            raise ValueError(f"init(process_sets=...): {ps!r} is already "
                             "registered")
        out.append(ps)
    with _lock:
        _pending_aliases.clear()
    return _expand_comm_sets(out), False


def on_init(sets, dynamic, again=False):
    """The engine started with `sets` as ids 1, 2, ...: registers them (and
    the aliases static_sets found). again=True: a re-init with the last
    init's sets (elastic), whose aliases are registered again too."""
    with _lock:
        _registered.clear()
        _dynamic[0] = bool(dynamic)
        global_process_set.ranks = list(range(lib().size()))
        for i, ps in enumerate(sets):
            ps.process_set_id = i + 1
            _registered[i + 1] = ps
        if not again:
            _last_aliases[:] = _pending_aliases
        _pending_aliases.clear()
        for alias, target in _last_aliases:
            alias.process_set_id = target.process_set_id
            _aliases.append(alias)


def on_shutdown():
    """The engine stopped: every registered set is unregistered."""
    with _lock:
        for ps in list(_registered.values()) + _aliases:
            ps.process_set_id = None
        _registered.clear()
        _aliases.clear()
        global_process_set.ranks = None
        _dynamic[0] = False


def _check_dynamic(what):
    check_initialized(f"{what}()")
    with _lock:
        dynamic = _dynamic[0]
    if not dynamic:
        raise ValueError(
            f"{what}(): runtime process set registration requires setting "
            "TERSE_DYNAMIC_PROCESS_SETS=1 (or init(process_sets='dynamic'))")


def add_process_set(process_set):
    """Registers a process set at runtime and returns it (a ProcessSet, or
    one made from a rank list). Collective over every rank, in the same order
    everywhere. ValueError without TERSE_DYNAMIC_PROCESS_SETS=1, for a set
    added before, or when a set of these ranks exists (the global set
    included)."""
    _check_dynamic("add_process_set")
    ps = (process_set if isinstance(process_set, ProcessSet)
          else ProcessSet(process_set))
    if ps is global_process_set or ps.ranks is None:
        raise ValueError("add_process_set(): the global process set always "
                         "exists")
    if ps.mpi_comm is not None:
        raise NotImplementedError(
            "add_process_set(ProcessSet(comm)): dynamically adding a process "
            "set defined by an MPI communicator is not implemented (as in "
            "Horovod); pass its list of world ranks")
    if ps.process_set_id is not None:
        raise ValueError(f"add_process_set(): {ps!r} has been added before")
    try:
        ps_id = lib().add_process_set(ps.ranks)
    except lib().TerseError as e:
        if "already holds ranks" in str(e):
            raise ValueError(f"add_process_set({ps.ranks}): a process set "
                             f"with these ranks exists ({e})") from None
        raise
    with _lock:
        ps.process_set_id = ps_id
        _registered[ps_id] = ps
    return ps


def remove_process_set(process_set):
    """Unregisters a process set; collective over every rank. Returns True
    when removed, False for the global set or a set not registered (as
    Horovod). ValueError without TERSE_DYNAMIC_PROCESS_SETS=1."""
    if not isinstance(process_set, ProcessSet):
        raise TypeError("remove_process_set() takes a ProcessSet, not "
                        f"{type(process_set).__name__}")
    if process_set._is_global() and process_set.process_set_id in (None, 0):
        return False
    _check_dynamic("remove_process_set")
    if process_set.process_set_id is None:
        return False
    lib().remove_process_set(process_set.process_set_id)
    with _lock:
        _registered.pop(process_set.process_set_id, None)
        process_set.process_set_id = None
    return True


__all__ = ["ProcessSet", "global_process_set", "add_process_set",
           "remove_process_set"]


# The name the bindings used before process sets existed.
check = resolve
