"""horovod.torch.compression's names in terse (for code that imports them
from the module): the same objects as terse.compression's. Compression.none
/ fp16 / bf16 keep Horovod's compress / decompress API; terse's own
compressors are selectable per call too (docs/torch.md)."""

from terse.compression import (BF16Compressor, Compression, Compressor,
                               FP16Compressor, NoneCompressor)

__all__ = ["Compression", "Compressor", "NoneCompressor", "FP16Compressor",
           "BF16Compressor"]
