"""terse.keras: Horovod's standalone horovod.keras API.

With TensorFlow 2.15 the standalone `keras` package is tf.keras (Keras 2),
so this is terse.tensorflow.keras under Horovod's other name: the same
DistributedOptimizer, callbacks and load_model. A `keras` that is not
tf.keras (Keras 3) is refused at import, naming the versions.
"""

import keras as _keras
import tensorflow as _tf

if not isinstance(_keras.optimizers.Adam(), _tf.keras.optimizers.Optimizer):
    raise ImportError(
        f"terse.keras needs the keras package to be tf.keras (Keras 2, as "
        f"TensorFlow {_tf.__version__} ships); found keras "
        f"{_keras.__version__}; use terse.tensorflow.keras")

from terse.tensorflow.keras import *  # noqa: E402,F401,F403
from terse.tensorflow.keras import __all__  # noqa: E402,F401
from terse.tensorflow.keras import __getattr__  # noqa: E402,F401
from terse.keras import callbacks  # noqa: E402,F401
from terse.tensorflow.keras import elastic  # noqa: E402,F401
