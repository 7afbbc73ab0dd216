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

import tensorflow as tf

from terse import basics
from terse import elastic_common as _common
from terse.tensorflow import functions, ops, session_objects

# The errors a failed terse collective raises in TensorFlow (on every rank).
RECOVERABLE_ERRORS = (tf.errors.FailedPreconditionError,
                      tf.errors.AbortedError, tf.errors.UnavailableError,
                      tf.errors.DeadlineExceededError)


HostsUpdatedInterrupt = _common.HostsUpdatedInterrupt


class State(_common.State):
    """Horovod's elastic State (terse.elastic_common.State) with
    terse.tensorflow's object broadcast and names."""

    def __init__(self, bcast_object=None, get_rank=None):
        super().__init__(bcast_object or functions.broadcast_object,
                         get_rank or basics.rank)

    def _auto_name(self, prefix):
        return ops._names.default(prefix, None)


class ObjectState(_common.ObjectState, State):
    """Picklable attributes (the keyword arguments) as elastic state."""


class TensorFlowState(ObjectState):
    """tf.Variables and picklable attributes: commit keeps copies of the
    variables' values, restore assigns them back, sync broadcasts rank
    0's. Eagerly the variables are `variables`. In a TF1 graph (or with
    `session`) they default to the graph's global variables, and every
    save, restore and sync runs in `session` (default: the default session
    when the state is made), as Horovod's."""

    def __init__(self, variables=None, session=None, **kwargs):
        self._session = None
        if session is not None or not tf.executing_eagerly():
            self._session = _session_graph_ops(self, variables, session)
            kwargs["bcast_object"] = self._broadcast_object_in_session
        else:
            self.variables = list(variables or [])
        self._values = None
        super().__init__(**kwargs)
        self._save_variables()

    def _broadcast_object_in_session(self, obj, root_rank=0, name=None):
        return functions.broadcast_object(obj, root_rank,
                                          session=self._session, name=name)

    def _all_variables(self):
        return self.variables

    def _save_variables(self):
        if self._session is not None:
            self._values = self._session.run(self.variables)
            return
        self._values = [v.numpy() for v in self._all_variables()]

    def save(self):
        self._save_variables()
        super().save()

    def restore(self):
        if self._session is not None:
            self._session.run(self._assign_op,
                              dict(zip(self._feeds, self._values)))
        else:
            for var, value in zip(self._all_variables(), self._values):
                var.assign(value)
        super().restore()

    def sync(self):
        if self._session is not None:
            if self._bcast_op is not None:
                self._session.run(self._bcast_op)
        else:
            variables = self._all_variables()
            if variables:
                functions.broadcast_variables(
                    variables, root_rank=0,
                    prefix=ops._names.default("elastic.variables", None))
        super().sync()


def _session_graph_ops(state, variables, session):
    """TF1: builds the state's assign and broadcast ops in the session's
    graph (once); returns the session."""
    session = session_objects.session_of(session, "TensorFlowState")
    with session.graph.as_default():
        state.variables = list(variables if variables is not None
                               else tf.compat.v1.global_variables())
        state._feeds = [tf.compat.v1.placeholder(v.dtype.base_dtype, v.shape)
                        for v in state.variables]
        state._assign_op = tf.group(*[v.assign(f) for v, f in
                                      zip(state.variables, state._feeds)])
        state._bcast_op = functions.broadcast_variables(
            state.variables, root_rank=0,
            prefix=ops._names.default("elastic.variables", None))
    return session


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


run = _common.make_run(RECOVERABLE_ERRORS)


__all__ = ["run", "State", "ObjectState", "TensorFlowState",
           "TensorFlowKerasState", "HostsUpdatedInterrupt",
           "RECOVERABLE_ERRORS"]
