"""Whole-model helpers: broadcast parameters, optimizer state and objects.

Call them on every rank, in the same order, after init():

    terse.broadcast_parameters(model.state_dict(), root_rank=0)
    terse.broadcast_optimizer_state(optimizer, root_rank=0)
    epoch = terse.broadcast_object(epoch, root_rank=0)
"""

import pickle

import torch

from terse import basics
from terse import process_sets
from terse.torch import ops


def broadcast_parameters(params, root_rank=0, prefix="broadcast.param",
                         process_set=process_sets.global_process_set):
    """Overwrites every tensor of `params` with `root_rank`'s, in place.

    params: a state_dict-like mapping name -> tensor (buffers included), or an
    iterable of (name, tensor) pairs such as model.named_parameters().
    Enqueues all broadcasts before waiting for any.
    """
    basics.check_initialized("broadcast_parameters()")
    process_sets.resolve(process_set, "broadcast_parameters()")
    if isinstance(params, dict):
        items = sorted(params.items())
    else:
        items = list(params)
        for item in items:
            if not (isinstance(item, tuple) and len(item) == 2):
                raise ValueError(
                    "params must be a dict or (name, tensor) pairs, e.g. "
                    "model.named_parameters(); got an element " +
                    repr(type(item).__name__))
        items.sort(key=lambda kv: kv[0])
    names = [name for name, _ in items]
    if len(set(names)) != len(names):
        raise ValueError("params holds a name twice")
    handles = []
    for name, tensor in items:
        if tensor is None:
            continue
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"params[{name!r}] is {type(tensor).__name__}, "
                            "not a tensor")
        handles.append(ops.broadcast_async_(tensor.data, root_rank,
                                            name=f"{prefix}.{name}",
                                            process_set=process_set))
    _synchronize_all(handles)


def _synchronize_all(handles):
    """Waits for every handle; raises the first error after all finished."""
    first_error = None
    for handle in handles:
        try:
            ops.synchronize(handle)
        except Exception as e:  # noqa: BLE001 - re-raised below.
            if first_error is None:
                first_error = e
    if first_error is not None:
        raise first_error


def broadcast_optimizer_state(optimizer, root_rank=0, model=None,
                              process_set=process_sets.global_process_set):
    """Makes every rank's optimizer state (and hyperparameters) root's.

    Sends root's optimizer.state_dict() as one object, so state that exists
    only on root (before the first step elsewhere) and non-tensor entries
    arrive too. For a terse DistributedOptimizer its 'terse' settings travel
    with it, and so do every rank's engine states when root has just loaded
    them from a checkpoint saved with state_dict(all_ranks=True): each rank
    restores its own.
    """
    basics.check_initialized("broadcast_optimizer_state()")
    process_sets.resolve(process_set, "broadcast_optimizer_state()")
    if model is not None:
        raise ValueError(
            "broadcast_optimizer_state(model=...) is not supported by terse: "
            "the optimizer's own state_dict travels whole; pass model=None")
    state = None
    if basics.rank() == root_rank:
        # A DistributedOptimizer sends every rank's engine state when it has
        # just loaded them from a checkpoint, else none.
        export = getattr(optimizer, "_terse_broadcast_state", None)
        state = export() if export else optimizer.state_dict()
    state = broadcast_object(state, root_rank,
                             name="broadcast.optimizer_state",
                             process_set=process_set)
    if basics.rank() != root_rank:
        optimizer.load_state_dict(state)


def _dumps(obj):
    # Plain pickle (tensors pickle by value), never torch.save: torch >= 2.6
    # loads torch.save files with weights_only=True, which refuses arbitrary
    # objects; pickle.loads reads these on every torch version.
    return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


def _loads(data):
    return pickle.loads(data)


def broadcast_object(obj, root_rank=0, name=None,
                     process_set=process_sets.global_process_set):
    """`root_rank`'s `obj` on every rank (pickled into a uint8 tensor: size,
    then bytes)."""
    basics.check_initialized("broadcast_object()")
    ps_id = process_sets.resolve(process_set, "broadcast_object()")
    name = name or ops._table.auto_name("broadcast_object", ps_id)
    is_root = basics.rank() == root_rank
    if is_root:
        payload = torch.frombuffer(bytearray(_dumps(obj)), dtype=torch.uint8)
        length = torch.tensor([payload.numel()], dtype=torch.int64)
    else:
        length = torch.zeros(1, dtype=torch.int64)
    ops.broadcast_(length, root_rank, name=f"{name}.size",
                   process_set=process_set)
    if not is_root:
        payload = torch.empty(int(length.item()), dtype=torch.uint8)
    ops.broadcast_(payload, root_rank, name=f"{name}.data",
                   process_set=process_set)
    if is_root:
        return obj
    return _loads(payload.numpy().tobytes())


def allgather_object(obj, name=None,
                     process_set=process_sets.global_process_set):
    """A list of every member's `obj`, in rank order (pickled into uint8
    tensors)."""
    basics.check_initialized("allgather_object()")
    ps_id = process_sets.resolve(process_set, "allgather_object()")
    name = name or ops._table.auto_name("allgather_object", ps_id)
    data = _dumps(obj)
    payload = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    lengths = ops.allgather(torch.tensor([len(data)], dtype=torch.int64),
                            name=f"{name}.size", process_set=process_set)
    gathered = ops.allgather(payload, name=f"{name}.data",
                             process_set=process_set).numpy()
    out, offset = [], 0
    for length in lengths.tolist():
        out.append(_loads(gathered[offset:offset + length].tobytes()))
        offset += length
    return out


__all__ = ["broadcast_parameters", "broadcast_optimizer_state",
           "broadcast_object", "allgather_object"]
