"""Horovod's process sets: ProcessSet, global_process_set, add/remove.

terse negotiates and reduces over every rank at once: the engine has one
negotiation and one set of buckets. So the global process set (all ranks)
is fully supported, and every operation accepts
`process_set=global_process_set`. A process set over a subset of ranks needs
per-set negotiation in the engine, which terse does not have yet: creating
one (ProcessSet(ranks) for fewer than all ranks, add_process_set,
init(process_sets=...), TERSE_DYNAMIC_PROCESS_SETS) or passing one to an op
raises ProcessSetsNotSupportedError, which names process sets.
"""

import threading

from terse._native import lib


def _error_class():
    base = lib().TerseError

    class ProcessSetsNotSupportedError(base, NotImplementedError):
        """A process set other than the global one was asked for. Both a
        TerseError and a NotImplementedError."""

    ProcessSetsNotSupportedError.__module__ = "terse"
    return ProcessSetsNotSupportedError


_error_lock = threading.Lock()
_error = []


def not_supported_error():
    """The ProcessSetsNotSupportedError class (made once, on first use, so
    this module imports without the native module)."""
    with _error_lock:
        if not _error:
            _error.append(_error_class())
        return _error[0]


def _refuse(what):
    raise not_supported_error()(
        f"{what}: terse supports only the global process set (all ranks) so "
        "far; process sets over a subset of ranks need per-set negotiation "
        "in the engine, which is not built yet. Pass "
        "process_set=global_process_set (the default)")


class ProcessSet:
    """A set of ranks that runs collectives together (Horovod's API).

    ProcessSet(ranks): ranks is a list of global ranks. Only the set of all
    ranks is usable in terse; global_process_set is it. process_set_id is 0
    for the global set."""

    def __init__(self, ranks_or_comm=None):
        if ranks_or_comm is not None and not isinstance(
                ranks_or_comm, (list, tuple, range)):
            _refuse("ProcessSet(mpi communicator)")
        self.ranks = (None if ranks_or_comm is None
                      else sorted(int(r) for r in ranks_or_comm))
        self.process_set_id = None

    def _is_global(self):
        if self is global_process_set:
            return True
        from terse import basics
        return (self.ranks is not None and basics.is_initialized()
                and self.ranks == list(range(basics.size())))

    def size(self):
        """The number of ranks in the set."""
        from terse import basics
        if self._is_global():
            return basics.size()
        return None if self.ranks is None else len(self.ranks)

    def rank(self):
        """This process's rank within the set."""
        from terse import basics
        if self._is_global():
            return basics.rank()
        _refuse("ProcessSet.rank() of a non-global process set")

    def included(self):
        """Whether this process belongs to the set."""
        from terse import basics
        if self._is_global():
            return True
        return self.ranks is not None and basics.rank() in self.ranks

    def __eq__(self, other):
        if not isinstance(other, ProcessSet):
            return NotImplemented
        if self is other:
            return True
        return self._is_global() and other._is_global()

    def __hash__(self):
        return hash(0) if self._is_global() else id(self)

    def __repr__(self):
        if self is global_process_set:
            return "ProcessSet(process_set_id=0, global)"
        return f"ProcessSet(ranks={self.ranks})"


global_process_set = ProcessSet()
global_process_set.process_set_id = 0


def check(process_set, what):
    """Returns None for the global process set (or one naming all ranks);
    raises ProcessSetsNotSupportedError naming `what` for any other."""
    if process_set is None or process_set is global_process_set:
        return
    if not isinstance(process_set, ProcessSet):
        raise TypeError(f"{what}: process_set must be a ProcessSet, not "
                        f"{type(process_set).__name__}")
    if process_set._is_global():
        return
    _refuse(f"{what} with process set {process_set.ranks}")


def check_init_process_sets(process_sets):
    """init(process_sets=...): None, [] or "dynamic" refused unless trivial."""
    if process_sets is None:
        return
    if isinstance(process_sets, str):
        _refuse(f"init(process_sets={process_sets!r}) (dynamic process sets)")
    for ps in process_sets:
        if ps is global_process_set:
            continue
        _refuse(f"init(process_sets=...) with {ps!r}")


def add_process_set(process_set):
    """Horovod registers a new process set at runtime; terse cannot yet
    (see the module docstring): raises ProcessSetsNotSupportedError, except
    for a set of all ranks, which is the global set and is returned."""
    from terse import basics
    basics.check_initialized("add_process_set()")
    ps = (process_set if isinstance(process_set, ProcessSet)
          else ProcessSet(process_set))
    if ps._is_global():
        _refuse("add_process_set() of the set of all ranks (it is "
                "global_process_set, which always exists)")
    _refuse(f"add_process_set({ps.ranks})")


def remove_process_set(process_set):
    """Horovod deregisters a process set; terse has none but the global one,
    which cannot be removed (Horovod refuses it too): returns False for it,
    raises ProcessSetsNotSupportedError for anything else."""
    if isinstance(process_set, ProcessSet) and process_set._is_global():
        return False
    _refuse("remove_process_set()")


__all__ = ["ProcessSet", "global_process_set", "add_process_set",
           "remove_process_set"]
