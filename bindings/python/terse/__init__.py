"""terse: gradient communication for data-parallel training.

    import terse.torch as terse
    terse.init()
    optimizer = terse.DistributedOptimizer(optimizer, model.named_parameters())

`terse.TerseError` (a RuntimeError) is what every engine error raises; its
message is the engine's. `terse.Compression` names the compressors.
The native module loads on first use, so the pure-Python parts (Compression)
import without it.
"""

from terse.compression import Compression, Compressor

__version__ = "0.1.0"

__all__ = ["Compression", "Compressor", "TerseError", "build_info",
           "__version__"]


def build_info(variables=None):
    """The text `terse_info` prints: version, backends, GPU, configuration.

    `variables` (TERSE_* name -> value) defaults to the environment's.
    """
    from terse import basics
    return basics.build_info(variables)


def __getattr__(name):
    if name == "TerseError":
        from terse._native import lib
        return lib().TerseError
    raise AttributeError(f"module 'terse' has no attribute {name!r}")
