"""terse.keras.callbacks: Horovod's horovod.keras.callbacks (the same
classes as terse.tensorflow.keras.callbacks)."""

from terse.tensorflow.keras.callbacks import (  # noqa: F401
    BestModelCheckpoint, BroadcastGlobalVariablesCallback,
    LearningRateScheduleCallback,
    LearningRateWarmupCallback, MetricAverageCallback)
