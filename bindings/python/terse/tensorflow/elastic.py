"""Horovod's elastic training API for TensorFlow, on a fixed set of ranks.

    import terse.tensorflow as hvd
    state = hvd.elastic.TensorFlowKerasState(model, optimizer, epoch=0)

    @hvd.elastic.run
    def train(state):
        while state.epoch < epochs:
            ...                       # steps; any collective may fail
            state.epoch += 1
            state.commit()            # a point to come back to

    train(state)

What terse does: `run` syncs the state from rank 0, then calls the
function. When a collective fails on every rank (terse raises a cross-rank
mismatch, a stalled or aborted operation on all of them: see
docs/tensorflow.md), every rank restores its last commit, runs the reset
callbacks, syncs from rank 0 again and calls the function anew. The engine
keeps running with the same ranks.

What it does not: add or remove hosts. terse has no elastic launcher (no
host discovery, no re-forming of the MPI job): a rank that dies ends the
job as with plain mpirun; HostsUpdatedInterrupt exists for Horovod code
but is never raised. After TERSE_ELASTIC_MAX_RESTORES (default 5)
consecutive failures without a commit in between, run re-raises the error.
"""

import copy
import functools
import os

import tensorflow as tf

from terse import basics
from terse._native import lib
from terse.tensorflow import functions, ops

# The errors a failed terse collective raises in TensorFlow (on every rank).
RECOVERABLE_ERRORS = (tf.errors.FailedPreconditionError,
                      tf.errors.AbortedError, tf.errors.UnavailableError,
                      tf.errors.DeadlineExceededError)


class HostsUpdatedInterrupt(RuntimeError):
    """Horovod's signal that hosts changed; never raised (fixed ranks)."""

    def __init__(self, skip_sync=False):
        super().__init__("hosts updated")
        self.skip_sync = skip_sync


class State:
    """commit() / restore() / sync() and reset callbacks; subclasses
    implement save(), restore() and sync()."""

    def __init__(self, bcast_object=None, get_rank=None):
        self._bcast_object = bcast_object or functions.broadcast_object
        self._rank = get_rank or basics.rank
        self._reset_callbacks = []
        self._commits = 0

    def register_reset_callbacks(self, callbacks):
        """Functions called (no arguments) after every restore."""
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
        """Nothing changes on terse's fixed ranks."""

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
                name=ops._names.default("elastic.sync", None))
            self._set_attrs()


class TensorFlowState(ObjectState):
    """tf.Variables (eager) and picklable attributes: commit keeps copies of
    the variables' values, restore assigns them back, sync broadcasts rank
    0's. TF1 sessions are not supported (`session` must be None)."""

    def __init__(self, variables=None, session=None, **kwargs):
        if session is not None:
            raise NotImplementedError("terse's elastic state is eager "
                                      "(TensorFlow 2); session must be None")
        self.variables = list(variables or [])
        self._values = None
        super().__init__(**kwargs)
        self._save_variables()

    def _all_variables(self):
        return self.variables

    def _save_variables(self):
        self._values = [v.numpy() for v in self._all_variables()]

    def save(self):
        self._save_variables()
        super().save()

    def restore(self):
        for var, value in zip(self._all_variables(), self._values):
            var.assign(value)
        super().restore()

    def sync(self):
        variables = self._all_variables()
        if variables:
            functions.broadcast_variables(
                variables, root_rank=0,
                prefix=ops._names.default("elastic.variables", None))
        super().sync()


class TensorFlowKerasState(TensorFlowState):
    """A Keras model's variables and its optimizer's (slots, iterations),
    plus picklable attributes. The optimizer's variables are those it has
    when the state is created or committed (build it first, e.g. with one
    step, to include its slots)."""

    def __init__(self, model, optimizer=None, backend=None, **kwargs):
        self.model = model
        self.optimizer = optimizer if optimizer is not None else \
            getattr(model, "optimizer", None)
        self._frozen = None
        super().__init__(variables=[], **kwargs)

    def _all_variables(self):
        variables = list(self.model.variables)
        if self.optimizer is not None:
            extra = self.optimizer.variables
            variables += list(extra() if callable(extra) else extra)
        if self._frozen is None or len(self._frozen) != len(variables):
            self._frozen = variables
        return self._frozen

    def _save_variables(self):
        self._frozen = None
        super()._save_variables()


def _max_restores():
    text = os.environ.get("TERSE_ELASTIC_MAX_RESTORES", "5")
    try:
        return max(0, int(text))
    except ValueError:
        raise lib().TerseError(
            f"TERSE_ELASTIC_MAX_RESTORES must be an integer, got {text!r}"
        ) from None


def run(func):
    """Horovod's elastic.run: func(state, ...) is retried from the last
    commit whenever a collective fails (see the module docstring)."""
    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        basics.check_initialized("elastic.run()")
        limit = _max_restores()
        failures, commits_at_failure = 0, None
        skip_sync = False
        while True:
            try:
                if not skip_sync:
                    state.sync()
                return func(state, *args, **kwargs)
            except RECOVERABLE_ERRORS:
                if commits_at_failure != state._commits:
                    failures = 0
                failures += 1
                commits_at_failure = state._commits
                if failures > limit:
                    raise
                state.restore()
                skip_sync = False
            except HostsUpdatedInterrupt as e:
                skip_sync = e.skip_sync
            state.on_reset()
    return wrapper


__all__ = ["run", "State", "ObjectState", "TensorFlowState",
           "TensorFlowKerasState", "HostsUpdatedInterrupt",
           "RECOVERABLE_ERRORS"]
