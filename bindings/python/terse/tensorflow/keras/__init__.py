"""terse for tf.keras (Horovod's horovod.tensorflow.keras API).

    import terse.tensorflow.keras as terse
    terse.init()
    optimizer = terse.DistributedOptimizer(tf.keras.optimizers.Adam(1e-3))
    model.compile(optimizer=optimizer, loss=..., metrics=[...])
    callbacks = [terse.callbacks.BroadcastGlobalVariablesCallback(0),
                 terse.callbacks.MetricAverageCallback()]
    model.fit(x, y, callbacks=callbacks,
              verbose=1 if terse.rank() == 0 else 0)
"""

import tensorflow as tf

from terse import basics as _basics

from terse.tensorflow import (Adasum, Average, Compression, Compressor, Max,
                              Min, Product, Sum, allgather_object, barrier,
                              broadcast_global_variables, broadcast_object,
                              broadcast_object_fn, broadcast_variables,
                              bucket_reports, bytes_sent, global_process_set,
                              grouped_allgather, grouped_allreduce, init,
                              is_initialized, join, local_rank,
                              local_rank_op, local_size, local_size_op,
                              notify_learning_rate_drop, rank, rank_op,
                              shutdown, size, size_op)
from terse.tensorflow import ops as _ops
from terse.tensorflow import composed as _composed
from terse.tensorflow import BASICS_FORWARDED
from terse.tensorflow import __getattr__ as _tf_getattr
from terse.tensorflow import alltoall, grouped_reducescatter
from terse.tensorflow.keras import callbacks, elastic
from terse.tensorflow.keras.callbacks import (BestModelCheckpoint,
                                              BroadcastGlobalVariablesCallback,
                                              LearningRateScheduleCallback,
                                              LearningRateWarmupCallback,
                                              MetricAverageCallback)
from terse.tensorflow.keras.optimizer import (DistributedOptimizer,
                                              PartialDistributedOptimizer,
                                              wrap_class)
from terse.tensorflow.sync_batch_norm import SyncBatchNormalization


def __getattr__(name):
    return _tf_getattr(name)


# Horovod's Keras collectives take values (numbers, numpy arrays, tensors)
# and, unlike horovod.tensorflow's, `name` second.
def allreduce(value, name=None, average=None, prescale_factor=1.0,
              postscale_factor=1.0, op=None, compression=None,
              process_set=None):
    """The reduction of `value` over ranks, as a tensor (default Average)."""
    op = _basics.resolve_average(op, average)
    return _ops.allreduce(tf.convert_to_tensor(value),
                          compression=compression, op=op,
                          prescale_factor=prescale_factor,
                          postscale_factor=postscale_factor, name=name,
                          process_set=process_set)


def allgather(value, name=None, process_set=None):
    """Every rank's `value` concatenated along dimension 0."""
    return _ops.allgather(tf.convert_to_tensor(value), name=name,
                          process_set=process_set)


def broadcast(value, root_rank, name=None, process_set=None):
    """root_rank's `value` on every rank."""
    return _ops.broadcast(tf.convert_to_tensor(value), root_rank, name=name,
                          process_set=process_set)


def reducescatter(value, name=None, op=Average, process_set=None):
    """This rank's rows of the reduction of `value` (Sum or Average)."""
    return _composed.reducescatter(tf.convert_to_tensor(value), op=op,
                                   name=name, process_set=process_set)




def _optimizer_classes(custom_optimizers):
    """{class name: {is_legacy: class}} of tf.keras' optimizers and
    `custom_optimizers` (those count as new-style)."""
    classes = {}
    for module, legacy in ((tf.keras.optimizers, False),
                           (tf.keras.optimizers.legacy, True)):
        for name in dir(module):
            obj = getattr(module, name)
            if isinstance(obj, type) and issubclass(
                    obj, (tf.keras.optimizers.Optimizer,
                          tf.keras.optimizers.legacy.Optimizer)):
                classes.setdefault(obj.__name__, {})[legacy] = obj
    for obj in custom_optimizers or []:
        classes.setdefault(obj.__name__, {})[False] = obj
        classes[obj.__name__][True] = obj
    return classes


def _loading_class(bases, compression):
    """A class whose from_config builds DistributedOptimizer(base(...)),
    base the legacy or new class of that name as the config says."""
    default = bases.get(False, bases.get(True))
    distributed = wrap_class(default)

    class Loader(distributed):
        @classmethod
        def from_config(cls, config, custom_objects=None):
            legacy = bool(config.get("is_legacy_optimizer", False))
            base = bases.get(legacy, default)
            return DistributedOptimizer(base.from_config(config),
                                        compression=compression)

    Loader.__name__ = default.__name__
    return Loader


def load_model(filepath, custom_optimizers=None, custom_objects=None,
               compression=None):
    """tf.keras.models.load_model(filepath) with the saved optimizer
    restored as a DistributedOptimizer (its slots and iterations included).

    custom_optimizers: optimizer classes beyond tf.keras.optimizers' that
    the model may have been saved with. compression: the restored
    optimizer's compression.
    """
    objects = {}
    for name, bases in _optimizer_classes(custom_optimizers).items():
        loader = _loading_class(bases, compression)
        objects[name] = loader
        objects[name.lower()] = loader
    objects.update(custom_objects or {})
    return tf.keras.models.load_model(filepath, custom_objects=objects)


__all__ = [
    "init", "shutdown", "is_initialized", "size", "rank", "local_rank",
    "local_size", "rank_op", "size_op", "local_rank_op", "local_size_op",
    "barrier", "join", "bucket_reports", "bytes_sent",
    "notify_learning_rate_drop", "Compression", "Compressor",
    "Sum", "Average", "Min", "Max", "Product", "Adasum", "global_process_set",
    "allreduce", "allgather", "broadcast", "grouped_allreduce",
    "grouped_allgather", "reducescatter", "grouped_reducescatter", "alltoall",
    "broadcast_variables", "broadcast_global_variables", "broadcast_object",
    "broadcast_object_fn", "allgather_object", "DistributedOptimizer",
    "PartialDistributedOptimizer", "BroadcastGlobalVariablesCallback",
    "MetricAverageCallback", "LearningRateScheduleCallback",
    "BestModelCheckpoint",
    "LearningRateWarmupCallback", "SyncBatchNormalization", "load_model",
    "callbacks", "elastic",
] + [n for n in BASICS_FORWARDED if hasattr(_basics, n)]
