"""Horovod's elastic training API on a fixed set of ranks.

    import terse.torch as hvd
    state = hvd.elastic.TorchState(model, optimizer, epoch=0, batch=0)

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            ...                       # steps; any collective may fail
            state.commit()            # a point to come back to

    train(state)

What terse does: `run` syncs the state from rank 0, then calls the function.
When a collective fails with HorovodInternalError (terse's TerseError: a
mismatch across ranks, a stalled tensor, ...), terse raises it on every
rank (docs/torch.md), so every rank restores its last commit, runs the
reset callbacks, syncs from rank 0 again and calls the function anew. The
engine keeps running: the ranks are the same ones.

What it does not: add or remove hosts. terse has no elastic launcher (no
host discovery, no re-forming of the MPI job), so a rank that dies ends the
job as with plain mpirun; HostsUpdatedInterrupt exists for Horovod code but
is never raised. After TERSE_ELASTIC_MAX_RESTORES (default 5) consecutive
failures without a commit in between, run re-raises the error instead of
looping.
"""

import copy
import math
import random

import torch

from terse import basics
from terse import elastic_common as _common
from terse.torch import functions
from terse.torch import ops


HostsUpdatedInterrupt = _common.HostsUpdatedInterrupt


class State(_common.State):
    """Horovod's elastic State (terse.elastic_common.State) with
    terse.torch's object broadcast and names."""

    def __init__(self, bcast_object=None, get_rank=None):
        super().__init__(bcast_object or functions.broadcast_object,
                         get_rank or basics.rank)

    def _auto_name(self, prefix):
        return ops._table.auto_name(prefix)


class ObjectState(_common.ObjectState, State):
    """Picklable attributes (the keyword arguments) as elastic state."""


class TorchState(ObjectState):
    """A model's and an optimizer's state plus picklable attributes.

    commit() keeps deep copies of model.state_dict() and
    optimizer.state_dict() in memory; restore() loads them back; sync()
    broadcasts rank 0's parameters, optimizer state and attributes.
    Keyword arguments that are ElasticSamplers are kept by their
    state_dict() (epoch and samples processed), not copied whole."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        self.model = model
        self.optimizer = optimizer
        self._saved_model = self._saved_optimizer = None
        self._samplers = {k: v for k, v in kwargs.items()
                          if isinstance(v, ElasticSampler)}
        self._saved_samplers = {}
        for name, sampler in self._samplers.items():
            setattr(self, name, sampler)
        super().__init__(**{k: v for k, v in kwargs.items()
                            if k not in self._samplers})
        self._save_torch()

    def _save_torch(self):
        if self.model is not None:
            self._saved_model = copy.deepcopy(self.model.state_dict())
        if self.optimizer is not None:
            state = self.optimizer.state_dict()
            # A terse DistributedOptimizer's engine state stays in the
            # engine (error-feedback residuals are not rolled back).
            state.pop("terse", None)
            self._saved_optimizer = copy.deepcopy(state)
        self._saved_samplers = {k: s.state_dict()
                                for k, s in self._samplers.items()}

    def save(self):
        self._save_torch()
        super().save()

    def restore(self):
        if self.model is not None:
            self.model.load_state_dict(self._saved_model)
        if self.optimizer is not None:
            self.optimizer.load_state_dict(self._saved_optimizer)
        for name, sampler in self._samplers.items():
            sampler.load_state_dict(self._saved_samplers[name])
        super().restore()

    def sync(self):
        if self.model is not None:
            functions.broadcast_parameters(
                self.model.state_dict(), root_rank=0,
                prefix=ops._table.auto_name("elastic.model"))
        if self.optimizer is not None:
            functions.broadcast_optimizer_state(self.optimizer, root_rank=0)
        if self._samplers:
            states = self._bcast_object(
                {k: s.state_dict() for k, s in self._samplers.items()},
                root_rank=0, name=ops._table.auto_name("elastic.samplers"))
            for name, sampler in self._samplers.items():
                sampler.load_state_dict(states[name])
        super().sync()


class ElasticSampler(torch.utils.data.Sampler):
    """Horovod's ElasticSampler: this rank's share of the samples of an
    epoch not processed yet.

    Each epoch the indices are shuffled with seed + epoch (when shuffle),
    the first processed_num are skipped, the rest padded by repetition to a
    multiple of size() and dealt out round-robin (rank r takes positions r,
    r + size, ...). record_batch(batch_idx, batch_size) counts a global
    batch (batch_size on every rank) as processed; state_dict() /
    load_state_dict() carry (epoch, processed_num), so TorchState restores
    it with the last commit and a restart resumes mid-epoch."""

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_num = 0
        self.reset()

    def set_epoch(self, epoch):
        """Starts epoch `epoch` from its first sample."""
        self.epoch = epoch
        self.processed_num = 0
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """One batch of batch_size per rank has been processed."""
        self.processed_num += batch_size * self.num_replicas

    def record_indices(self, indices):
        """`indices` (this rank's, as a list) have been processed."""
        self.processed_num += len(indices) * self.num_replicas

    def state_dict(self):
        return {"epoch": self.epoch, "processed_num": self.processed_num}

    def load_state_dict(self, state_dict):
        self.epoch = state_dict["epoch"]
        self.processed_num = state_dict["processed_num"]
        self.reset()

    def reset(self):
        """Re-deals the remaining indices over the current ranks."""
        self.num_replicas = basics.size()
        self.rank = basics.rank()
        order = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(order)
        self.remaining_indices = order[self.processed_num:]
        self.num_samples = int(math.ceil(len(self.remaining_indices) /
                                         self.num_replicas))
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self):
        indices = list(self.remaining_indices)
        while indices and len(indices) < self.total_size:
            indices += indices[:self.total_size - len(indices)]
        return iter(indices[self.rank:self.total_size:self.num_replicas])

    def __len__(self):
        return self.num_samples


run = _common.make_run(ops.HorovodInternalError)


__all__ = ["run", "State", "ObjectState", "TorchState", "ElasticSampler",
           "HostsUpdatedInterrupt"]
