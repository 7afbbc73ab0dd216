"""SyncBatchNormalization: batch normalization over the global batch.

In training, the mean and variance are those of every rank's batch
together: each rank allreduces (Sum) its element count, the sum of its
inputs and the sum of their squares over the reduced axes, so ranks may
hold batches of different sizes (Horovod's averages the ranks' moments,
which is the same when the batches are equal). float16 inputs are reduced
in float32. Inference uses the moving statistics, which every rank updates
from the same global moments.
"""

import tensorflow as tf

from terse.tensorflow import ops


class SyncBatchNormalization(tf.keras.layers.BatchNormalization):
    """tf.keras BatchNormalization whose training statistics span all ranks.

    Takes BatchNormalization's arguments; `fused` is always False (the
    fused kernel computes its statistics itself). Every rank must call the
    layer the same number of times in the same order.
    """

    def __init__(self, fused=False, **kwargs):
        if fused:
            raise ValueError("SyncBatchNormalization does not support "
                             "fused=True")
        super().__init__(fused=False, **kwargs)

    def _calculate_mean_and_var(self, inputs, reduction_axes, keep_dims,
                                mask=None):
        if mask is not None:
            raise NotImplementedError(
                "SyncBatchNormalization does not support masks")
        x = tf.cast(inputs, tf.float32) if inputs.dtype == tf.float16 \
            else inputs
        count = tf.cast(tf.reduce_prod(tf.gather(tf.shape(x),
                                                 reduction_axes)), x.dtype)
        total = tf.reduce_sum(x, reduction_axes, keepdims=True)
        squares = tf.reduce_sum(tf.square(x), reduction_axes, keepdims=True)
        base = f"{self.name}.moments"
        count = ops.allreduce(count, op=ops.Sum, name=f"{base}.count")
        total = ops.allreduce(total, op=ops.Sum, name=f"{base}.sum")
        squares = ops.allreduce(squares, op=ops.Sum, name=f"{base}.squares")
        mean = total / count
        variance = tf.maximum(squares / count - tf.square(mean), 0.0)
        if not keep_dims:
            mean = tf.squeeze(mean, reduction_axes)
            variance = tf.squeeze(variance, reduction_axes)
        if inputs.dtype == tf.float16:
            mean = tf.cast(mean, tf.float16)
            variance = tf.cast(variance, tf.float16)
        return mean, variance
