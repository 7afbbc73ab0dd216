"""What Horovod's elastic API is in every framework binding, on terse's
fixed set of ranks: State / ObjectState (commit, restore, sync, reset
callbacks) and the `run` loop. terse.torch.elastic and
terse.tensorflow.elastic give them their framework's object broadcast,
name table and recoverable errors, and add their own states.

What `run` does: sync the state from rank 0, call the function; when a
collective fails on every rank (one of the binding's recoverable errors),
every rank restores its last commit, runs the reset callbacks, syncs from
rank 0 again and calls the function anew; when the error stopped the
engine (a failed collective, a stall past TERSE_STALL_SHUTDOWN_SECONDS),
every rank first re-initialises terse with its last init's settings, static
process sets registered again under the same ids (basics.reinit, Horovod's
shutdown(); init()). After TERSE_ELASTIC_MAX_RESTORES
(default 5) consecutive failures without a commit in between, the error
is re-raised. Hosts are never added or removed: HostsUpdatedInterrupt
exists for Horovod code and is never raised by terse.
"""

import copy
import functools
import os

from terse import basics
from terse._native import lib


class HostsUpdatedInterrupt(RuntimeError):
    """Horovod's signal that hosts were added or removed; terse never raises
    it (fixed ranks)."""

    def __init__(self, skip_sync=False):
        super().__init__("hosts updated")
        self.skip_sync = skip_sync


class State:
    """Horovod's elastic State: commit() / restore() / sync() plus reset
    callbacks. Subclasses implement save(), restore() and sync(); a
    binding's subclass supplies the object broadcast (bcast_object(obj,
    root_rank=, name=)) and _auto_name(prefix), a name every rank derives
    alike."""

    def __init__(self, bcast_object, get_rank):
        self._bcast_object = bcast_object
        self._rank = get_rank
        self._reset_callbacks = []
        self._commits = 0

    def register_reset_callbacks(self, callbacks):
        """Functions called (no arguments) after every restore, before the
        state is synced again."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        for callback in self._reset_callbacks:
            callback()

    def on_hosts_updated(self, timestamp, update_res):
        """Horovod's listener hook; hosts never change in terse."""

    def commit(self):
        """Saves the state in memory as the point restore() returns to."""
        self.save()
        self._commits += 1
        self.check_host_updates()

    def check_host_updates(self):
        """Horovod raises HostsUpdatedInterrupt here when hosts changed; on
        terse's fixed ranks nothing changes."""

    def _auto_name(self, prefix):
        raise NotImplementedError()

    def save(self):
        raise NotImplementedError()

    def restore(self):
        raise NotImplementedError()

    def sync(self):
        raise NotImplementedError()


class ObjectState(State):
    """Picklable attributes (the keyword arguments) as elastic state."""

    def __init__(self, bcast_object=None, get_rank=None, **kwargs):
        super().__init__(bcast_object, get_rank)
        self._saved_state = kwargs
        self._set_attrs()

    def _set_attrs(self):
        for name, value in self._saved_state.items():
            setattr(self, name, value)

    def save(self):
        self._saved_state = {name: copy.deepcopy(getattr(self, name))
                             for name in self._saved_state}

    def restore(self):
        self._set_attrs()

    def sync(self):
        if self._saved_state:
            self._saved_state = self._bcast_object(
                self._saved_state, root_rank=0,
                name=self._auto_name("elastic.sync"))
            self._set_attrs()


def max_restores():
    """TERSE_ELASTIC_MAX_RESTORES (default 5), validated."""
    text = os.environ.get("TERSE_ELASTIC_MAX_RESTORES", "5")
    try:
        return max(0, int(text))
    except ValueError:
        raise lib().TerseError(
            f"TERSE_ELASTIC_MAX_RESTORES must be an integer, got {text!r}"
        ) from None


def make_run(recoverable_errors):
    """Horovod's elastic.run for a binding whose failed collectives raise
    one of `recoverable_errors` (an exception class or a tuple)."""
    def run(func):
        """Horovod's elastic.run: func(state, ...) is retried from the last
        commit whenever a collective fails (see terse.elastic_common)."""
        @functools.wraps(func)
        def wrapper(state, *args, **kwargs):
            basics.check_initialized("elastic.run()")
            limit = max_restores()
            failures, commits_at_failure = 0, None
            skip_sync = False
            while True:
                try:
                    if not skip_sync:
                        state.sync()
                    return func(state, *args, **kwargs)
                except recoverable_errors:
                    if commits_at_failure != state._commits:
                        failures = 0
                    failures += 1
                    commits_at_failure = state._commits
                    if failures > limit:
                        raise
                    if basics.engine_error() is not None:
                        # The engine stopped (fatal errors are agreed by
                        # every rank): start it again, static process sets
                        # included, before restoring into it.
                        basics.reinit()
                    state.restore()
                    skip_sync = False
                except HostsUpdatedInterrupt as e:
                    skip_sync = e.skip_sync
                state.on_reset()
        return wrapper
    return run
