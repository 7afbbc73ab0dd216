"""terse for tf.keras (Horovod-style API).

    import terse.tensorflow.keras as terse
    terse.init()
    optimizer = terse.DistributedOptimizer(tf.keras.optimizers.Adam(1e-3))
    model.compile(optimizer=optimizer, loss=..., metrics=[...])
    model.fit(x, y, callbacks=[terse.BroadcastGlobalVariablesCallback(0),
                               terse.MetricAverageCallback()],
              verbose=1 if terse.rank() == 0 else 0)
"""

from terse.tensorflow import (Average, Compression, Compressor, Max, Min, Sum,
                              allgather, allreduce, barrier, broadcast,
                              broadcast_variables, bucket_reports, bytes_sent,
                              init, is_initialized, join, local_rank,
                              local_size, notify_learning_rate_drop, rank,
                              shutdown, size)
from terse.tensorflow.keras import callbacks
from terse.tensorflow.keras.callbacks import (BroadcastGlobalVariablesCallback,
                                              MetricAverageCallback)
from terse.tensorflow.keras.optimizer import DistributedOptimizer

__all__ = [
    "init", "shutdown", "is_initialized", "size", "rank", "local_rank",
    "local_size", "barrier", "join", "bucket_reports", "bytes_sent",
    "notify_learning_rate_drop", "Compression", "Compressor",
    "Sum", "Average", "Min", "Max", "allreduce", "allgather", "broadcast",
    "broadcast_variables", "DistributedOptimizer",
    "BroadcastGlobalVariablesCallback", "MetricAverageCallback", "callbacks",
]
