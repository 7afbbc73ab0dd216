"""Compression for terse.tensorflow: Horovod's object API on tf tensors.

Compression.none / fp16 / bf16 have compress(tensor) -> (tensor, ctx) and
decompress(tensor, ctx) on TensorFlow tensors, as horovod.tensorflow's
Compression does: fp16 and bf16 cast floating-point tensors for the wire
and back to ctx's dtype; other dtypes pass unchanged. allreduce and the
optimizers apply them in TensorFlow (the gradient flows through the casts).
terse's other compressors (topk, powersgd, gravac, ...) are the shared
terse.compression ones: they travel with the op to the engine, which
compresses per fused bucket.
"""

import tensorflow as tf

from terse import compression as _shared
from terse.compression import Compressor


class NoneCompressor(_shared.NoneCompressor):
    """Identity: compress returns (tensor, None)."""

    __slots__ = ()


def _cast(wire):
    def compress(tensor):
        ctx = tensor.dtype
        if tensor.dtype.is_floating and tensor.dtype != wire:
            tensor = tf.cast(tensor, wire)
        return tensor, ctx

    def decompress(tensor, ctx):
        if ctx is not None and ctx.is_floating and tensor.dtype != ctx:
            tensor = tf.cast(tensor, ctx)
        return tensor

    return staticmethod(compress), staticmethod(decompress)


class FP16Compressor(_shared.FP16Compressor):
    """Floating-point tensors cast to float16 for the wire and back."""

    __slots__ = ()
    compress, decompress = _cast(tf.float16)


class BF16Compressor(_shared.BF16Compressor):
    """Like FP16Compressor with bfloat16 on the wire."""

    __slots__ = ()
    compress, decompress = _cast(tf.bfloat16)


_TF_CLASSES = {"none": NoneCompressor, "fp16": FP16Compressor,
               "bf16": BF16Compressor}


class Compression(_shared.Compression):
    """Every compressor by name; none / fp16 / bf16 work on tf tensors."""

    none = NoneCompressor("none")
    fp16 = FP16Compressor("fp16")
    bf16 = BF16Compressor("bf16")

    @staticmethod
    def get(choice, cf=None):
        """A Compressor from a Compressor, a name or 'name:cf'; none, fp16
        and bf16 come back as this module's TensorFlow classes."""
        found = _shared.Compression.get(choice, cf)
        cls = _TF_CLASSES.get(found.name)
        if cls is not None and not isinstance(found, cls):
            return cls(found.name, found.cf)
        return found


__all__ = ["Compression", "Compressor", "NoneCompressor", "FP16Compressor",
           "BF16Compressor"]
