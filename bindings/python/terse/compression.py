"""Names of terse's compressors, chosen in code or with TERSE_COMPRESSION.

The engine compresses (per fused bucket, with error feedback); Python only
names the choice and hands it down. `Compression.topk` is a choice with the
engine's default compression factor (TERSE_CF); `Compression.topk(cf=100)`
carries its own.

    terse.init(compression=terse.Compression.topk(cf=100))   # whole process
    terse.DistributedOptimizer(opt, params, compression=terse.Compression.fp16)
"""

import os

# Every word TERSE_COMPRESSION accepts (DESIGN.md §7), in its order.
NAMES = ("none", "fp16", "bf16", "topk", "randomk", "dgc", "redsync",
         "threshold", "powersgd", "qsgd", "efsignsgd", "gravac", "accordion")

_DOCS = {
    "none": "dense, no compression",
    "fp16": "cast to IEEE half precision for the wire",
    "bf16": "cast to bfloat16 for the wire",
    "topk": "keep the k largest magnitudes (k = d / cf), error feedback",
    "randomk": "keep k elements at shared random positions, error feedback",
    "dgc": "deep gradient compression: sampled top-k threshold, momentum "
           "correction",
    "redsync": "RedSync: threshold found by binary search on the mean/max",
    "threshold": "keep elements whose magnitude passes a fixed threshold",
    "powersgd": "low-rank (PowerSGD) factors P and Q, error feedback",
    "qsgd": "stochastic quantisation to a few levels",
    "efsignsgd": "scaled sign with error feedback",
    "gravac": "GraVAC: adapts the compression factor per bucket from the "
              "gradient-information loss",
    "accordion": "Accordion: switches PowerSGD ranks (or a sparsifier's "
                 "CFs) between critical and other regimes",
}


class Compressor:
    """One compression choice: a name and an optional compression factor.

    Passed to allreduce(compression=...) or DistributedOptimizer it travels
    with the tensor to the engine, which compresses on the wire (per fused
    bucket; tensors of different choices never share a bucket).

    compress(tensor) -> (tensor, ctx) and decompress(tensor, ctx) are
    Horovod's object API (horovod.torch.compression), static methods on
    Compression.none / fp16 / bf16: fp16 and bf16 cast floating-point tensors
    for the wire and back to ctx's dtype, none is the identity. terse's own
    compressors (topk, powersgd, gravac, ...) run inside the engine; their
    compress() raises NotImplementedError.
    """

    __slots__ = ("name", "cf")

    @staticmethod
    def compress(tensor):
        raise NotImplementedError(
            "this compressor runs inside terse's engine; pass it as "
            "allreduce(..., compression=...) instead of calling compress()")

    @staticmethod
    def decompress(tensor, ctx):
        raise NotImplementedError(
            "this compressor runs inside terse's engine; pass it as "
            "allreduce(..., compression=...) instead of calling decompress()")

    def __init__(self, name, cf=None):
        if name not in NAMES:
            raise ValueError(
                f"unknown compressor {name!r}; accepted: {', '.join(NAMES)}")
        if cf is not None:
            cf = float(cf)
            if not cf >= 1.0:
                raise ValueError(
                    f"compression factor {cf} for {name!r} must be >= 1")
        self.name = name
        self.cf = cf

    def __call__(self, cf=None):
        """The same compressor with compression factor `cf`."""
        return type(self)(self.name, cf)

    @property
    def doc(self):
        return _DOCS[self.name]

    def spec(self):
        """'name' or 'name:cf', as TERSE_COMPRESSION_RULES writes a policy."""
        if self.cf is None:
            return self.name
        return f"{self.name}:{self.cf:g}"

    def __eq__(self, other):
        return (isinstance(other, Compressor) and self.name == other.name
                and self.cf == other.cf)

    def __hash__(self):
        return hash((self.name, self.cf))

    def __repr__(self):
        if self.cf is None:
            return f"Compression.{self.name}"
        return f"Compression.{self.name}(cf={self.cf:g})"


class NoneCompressor(Compressor):
    """Horovod's NoneCompressor: compress/decompress are the identity."""

    __slots__ = ()

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


def _cast_compressor(wire_dtype_name):
    def compress(tensor):
        import torch
        ctx = tensor.dtype
        if tensor.dtype.is_floating_point:
            tensor = tensor.type(getattr(torch, wire_dtype_name))
        return tensor, ctx

    def decompress(tensor, ctx):
        if ctx is not None and ctx.is_floating_point and tensor.dtype != ctx:
            tensor = tensor.type(ctx)
        return tensor

    return staticmethod(compress), staticmethod(decompress)


class FP16Compressor(Compressor):
    """Horovod's FP16Compressor: floating tensors cast to float16 and back."""

    __slots__ = ()
    compress, decompress = _cast_compressor("float16")


class BF16Compressor(Compressor):
    """Like FP16Compressor with bfloat16 on the wire."""

    __slots__ = ()
    compress, decompress = _cast_compressor("bfloat16")


_CLASSES = {"none": NoneCompressor, "fp16": FP16Compressor,
            "bf16": BF16Compressor}


def _make(name, cf=None):
    return _CLASSES.get(name, Compressor)(name, cf)


class Compression:
    """Every compressor by name: Compression.none, Compression.fp16, ..."""

    none = NoneCompressor("none")
    fp16 = FP16Compressor("fp16")
    bf16 = BF16Compressor("bf16")
    topk = Compressor("topk")
    randomk = Compressor("randomk")
    dgc = Compressor("dgc")
    redsync = Compressor("redsync")
    threshold = Compressor("threshold")
    powersgd = Compressor("powersgd")
    qsgd = Compressor("qsgd")
    efsignsgd = Compressor("efsignsgd")
    gravac = Compressor("gravac")
    accordion = Compressor("accordion")

    names = NAMES

    @staticmethod
    def get(choice, cf=None):
        """A Compressor from a Compressor, a name, or 'name:cf'."""
        if isinstance(choice, Compressor):
            return choice if cf is None else choice(cf)
        if not isinstance(choice, str):
            raise TypeError(
                f"compression must be a Compressor or a name, not {choice!r}")
        name, sep, cf_text = choice.strip().lower().partition(":")
        if sep:
            if cf is not None:
                raise ValueError(f"{choice!r} names a CF and cf={cf} too")
            try:
                cf = float(cf_text)
            except ValueError:
                raise ValueError(
                    f"bad compression factor in {choice!r}") from None
        return _make(name, cf)

    @staticmethod
    def from_env(environ=None):
        """The process-wide choice of TERSE_COMPRESSION and TERSE_CF."""
        environ = os.environ if environ is None else environ
        name = environ.get("TERSE_COMPRESSION", "none") or "none"
        cf = environ.get("TERSE_CF")
        try:
            return _make(name.strip().lower(), float(cf) if cf else None)
        except ValueError as e:
            raise ValueError(f"TERSE_COMPRESSION={name!r} TERSE_CF={cf!r}: "
                             f"{e}") from None
