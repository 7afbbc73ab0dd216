"""Fashion-MNIST from Debian's dataset-fashion-mnist, read with gzip + numpy.

The idx format (LeCun's MNIST files): a big-endian header of a magic number
whose third byte is the element type (0x08 = uint8) and whose fourth byte is
the number of dimensions, then one big-endian uint32 per dimension, then the
elements row-major. Nothing here imports torch, so the TensorFlow and plain
numpy programs reuse it.

    from fashion_mnist_data import load
    train_x, train_y, test_x, test_y = load()        # float32 in [0, 1], int64
    x, y = shard(train_x, train_y, rank, size)       # this rank's slice
"""

import gzip
import os
import struct

import numpy as np

DEFAULT_DIR = "/usr/share/datasets/fashion-mnist"

FILES = {
    "train_images": "train-images-idx3-ubyte.gz",
    "train_labels": "train-labels-idx1-ubyte.gz",
    "test_images": "t10k-images-idx3-ubyte.gz",
    "test_labels": "t10k-labels-idx1-ubyte.gz",
}

CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal",
           "Shirt", "Sneaker", "Bag", "Ankle boot")

_IDX_TYPES = {
    0x08: np.uint8,
    0x09: np.int8,
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}


class IdxFormatError(ValueError):
    """The file is not a well-formed idx file."""


def parse_idx(data, name="<bytes>"):
    """Parses the bytes of one (decompressed) idx file into a numpy array.

    Raises IdxFormatError naming `name` when the header is malformed or the
    payload is shorter or longer than the header says.
    """
    if len(data) < 4:
        raise IdxFormatError(f"{name}: {len(data)} bytes, shorter than a header")
    zero, type_code, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or type_code not in _IDX_TYPES or ndim == 0:
        raise IdxFormatError(
            f"{name}: bad magic {data[:4].hex()} (want 0000 <type> <ndim>)")
    header = 4 + 4 * ndim
    if len(data) < header:
        raise IdxFormatError(f"{name}: truncated dimension list")
    dims = struct.unpack(">" + "I" * ndim, data[4:header])
    dtype = np.dtype(_IDX_TYPES[type_code])
    want = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    if len(data) - header != want:
        raise IdxFormatError(
            f"{name}: {len(data) - header} payload bytes, header says {want}")
    array = np.frombuffer(data, dtype=dtype, offset=header).reshape(dims)
    return array.astype(dtype.newbyteorder("="), copy=False)


def read_idx_gz(path):
    """Reads one gzip-compressed idx file."""
    with gzip.open(path, "rb") as f:
        return parse_idx(f.read(), name=path)


def load(directory=None):
    """Returns (train_x, train_y, test_x, test_y).

    Images are float32 of shape [N, 1, 28, 28] scaled to [0, 1]; labels int64.
    `directory` defaults to $FASHION_MNIST_DIR or Debian's location.
    """
    directory = directory or os.environ.get("FASHION_MNIST_DIR", DEFAULT_DIR)
    arrays = {}
    for key, filename in FILES.items():
        path = os.path.join(directory, filename)
        if not os.path.exists(path):
            raise FileNotFoundError(
                f"{path} not found: install Debian's dataset-fashion-mnist "
                "or set FASHION_MNIST_DIR")
        arrays[key] = read_idx_gz(path)
    for split in ("train", "test"):
        images = arrays[f"{split}_images"]
        labels = arrays[f"{split}_labels"]
        if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
            raise IdxFormatError(
                f"{split}: images {images.shape} and labels {labels.shape} "
                "do not pair up")

    def images(a):
        return (a.astype(np.float32) / 255.0)[:, None, :, :]

    return (images(arrays["train_images"]),
            arrays["train_labels"].astype(np.int64),
            images(arrays["test_images"]),
            arrays["test_labels"].astype(np.int64))


def shard(x, y, rank, size):
    """Rank `rank`'s contiguous 1/size of (x, y); every shard the same length.

    The last len(x) % size samples are dropped so every rank runs the same
    number of steps (no rank waits on a collective the others never start).
    """
    if not 0 <= rank < size:
        raise ValueError(f"rank {rank} outside [0, {size})")
    per_rank = len(x) // size
    begin = rank * per_rank
    return x[begin:begin + per_rank], y[begin:begin + per_rank]
