"""The soak's inputs (integration/soak.py): the dtypes it draws from, their
sizes and unit roundoffs, and each rank's input of an operation, drawn
from (seed, operation, rank) so that any rank can rebuild any other rank's
input to check a result.
"""

import numpy as np
import torch

DTYPES = {
    "float32": (torch.float32, np.float32),
    "float64": (torch.float64, np.float64),
    "float16": (torch.float16, np.float16),
    "bfloat16": (torch.bfloat16, None),  # numpy has none: kept as float32.
    "int32": (torch.int32, np.int32),
    "int64": (torch.int64, np.int64),
    "uint8": (torch.uint8, np.uint8),
}
ITEMSIZE = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2,
            "int32": 4, "int64": 8, "uint8": 1}
FLOATS = ("float32", "float64", "float16", "bfloat16")
EPS = {"float32": 2.0 ** -23, "float64": 2.0 ** -52, "float16": 2.0 ** -10,
       "bfloat16": 2.0 ** -7}

TILE = 65521  # Elements of random data behind a large input (a prime).


def make_input(seed, op, rank, dtype, shape):
    """Rank `rank`'s input of operation `op`: a numpy array (bfloat16 as the
    float32 values it holds exactly)."""
    rng = np.random.default_rng([seed, op, rank, 7])
    n = int(np.prod(shape)) if shape else 1
    if n > TILE:
        # Large inputs: a random block of TILE (prime) elements repeated,
        # so that 4 ranks regenerating 4 inputs of 64 MiB stay cheap on 2
        # cores (the data still differs per rank, op and element position
        # within a block).
        block = make_input(seed, op, rank, dtype, [TILE]).reshape(-1)
        return np.resize(block, n).reshape(shape)
    if dtype in ("float32", "float16", "float64"):
        x = rng.standard_normal(n, dtype=np.float64 if dtype == "float64"
                                else np.float32).astype(DTYPES[dtype][1])
    elif dtype == "bfloat16":
        x = bf16_round(rng.standard_normal(n, dtype=np.float32))
    elif dtype == "int32":
        x = rng.integers(-1000, 1000, n, dtype=np.int32)
    elif dtype == "int64":
        x = rng.integers(-(1 << 40), 1 << 40, n, dtype=np.int64)
    else:
        x = rng.integers(0, 256, n, dtype=np.uint8)
    return x.reshape(shape)


def bf16_round(x):
    """float32 -> nearest bfloat16 (ties to even), as float32."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    u = (u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) \
        & np.uint32(0xFFFF0000)
    return u.view(np.float32)


def to_torch(x, dtype):
    if dtype == "bfloat16":
        return torch.from_numpy(np.ascontiguousarray(x)).to(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(x))


def to_numpy(t, dtype):
    if dtype == "bfloat16":
        return t.to(torch.float32).numpy()
    return t.numpy()
