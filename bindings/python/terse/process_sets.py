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

A ProcessSet built from an mpi4py communicator is not supported (terse
makes its sub-communicators itself): ProcessSetsNotSupportedError.
"""

import threading

from terse._native import lib


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


class ProcessSet:
    """A set of world ranks that runs collectives together (Horovod's API).

    ProcessSet(ranks): ranks is a list of world ranks (sorted here).
    process_set_id is None until the set is registered (init or
    add_process_set), 0 for global_process_set (whose ranks are every rank
    while terse runs)."""

    def __init__(self, ranks_or_comm=None):
        if ranks_or_comm is not None and not isinstance(
                ranks_or_comm, (list, tuple, range)):
            raise not_supported_error()(
                "ProcessSet(mpi communicator): terse makes process sets from "
                "rank lists only; pass ProcessSet(comm.Get_group() ranks) as "
                "a list of world ranks")
        self.ranks = (None if ranks_or_comm is None
                      else sorted(int(r) for r in ranks_or_comm))
        if self.ranks is not None and len(set(self.ranks)) != len(self.ranks):
            raise ValueError(f"ProcessSet({list(ranks_or_comm)}): a rank is "
                             "listed twice")
        self.process_set_id = None

    def _is_global(self):
        if self is global_process_set or self.process_set_id == 0:
            return True
        from terse import basics
        return (self.ranks is not None and basics.is_initialized()
                and self.ranks == list(range(basics.size())))

    def _world_ranks(self):
        from terse import basics
        if self._is_global():
            return list(range(basics.size()))
        return self.ranks

    def size(self):
        """The number of ranks in the set (None before registration)."""
        from terse import basics
        if self._is_global():
            return basics.size()
        if self.process_set_id is None:
            return None
        return len(self.ranks)

    def rank(self):
        """This process's rank within the set (None before registration);
        ValueError when this process is not in it."""
        from terse import basics
        if self._is_global():
            return basics.rank()
        if self.process_set_id is None:
            return None
        me = basics.rank()
        if me not in self.ranks:
            raise ValueError(f"rank {me} is not part of process set "
                             f"{self.process_set_id} (ranks {self.ranks})")
        return self.ranks.index(me)

    def included(self):
        """Whether this process belongs to the set (None before
        registration)."""
        from terse import basics
        if self._is_global():
            return True
        if self.process_set_id is None:
            return None
        return basics.rank() in self.ranks

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
        from terse import basics
        raise ValueError(
            f"{what}: this rank ({basics.rank()}) is not in process set "
            f"{process_set.process_set_id} (ranks {process_set.ranks}); only "
            "its members may call it")
    return process_set.process_set_id


def size_of(process_set_id):
    """The number of ranks of registered set `process_set_id`."""
    from terse import basics
    if process_set_id == 0:
        return basics.size()
    with _lock:
        ps = _registered.get(process_set_id)
    return len(ps.ranks) if ps is not None else len(
        lib().process_set_ranks(process_set_id))


def rank_in(process_set_id):
    """This process's rank within registered set `process_set_id`."""
    from terse import basics
    if process_set_id == 0:
        return basics.rank()
    with _lock:
        ps = _registered.get(process_set_id)
    ranks = ps.ranks if ps is not None else lib().process_set_ranks(
        process_set_id)
    return ranks.index(basics.rank())


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
    return out, False


def on_init(sets, dynamic):
    """The engine started with `sets` as ids 1, 2, ...: registers them."""
    from terse import basics
    with _lock:
        _registered.clear()
        _dynamic[0] = bool(dynamic)
        global_process_set.ranks = list(range(basics.size()))
        for i, ps in enumerate(sets):
            ps.process_set_id = i + 1
            _registered[i + 1] = ps


def on_shutdown():
    """The engine stopped: every registered set is unregistered."""
    with _lock:
        for ps in _registered.values():
            ps.process_set_id = None
        _registered.clear()
        global_process_set.ranks = None
        _dynamic[0] = False


def _check_dynamic(what):
    from terse import basics
    basics.check_initialized(f"{what}()")
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
