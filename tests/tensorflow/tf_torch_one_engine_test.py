"""One process, both frameworks, one engine: init() through terse.torch
starts the engine that terse.tensorflow's ops use (both link libterse.so),
collectives from both interleave, and shutdown() through either stops it
for both. Runs with the TensorFlow environment's Python, which sees Debian's
torch."""

import numpy as np
import tensorflow as tf
import torch

import terse.tensorflow as tft
import terse.torch as tt
from mpi_testlib import expect, run


def test_one_engine(_):
    expect(tft.is_initialized(), "terse.torch's init() is terse.tensorflow's")
    expect(tft.size() == tt.size() and tft.rank() == tt.rank(), "same place")
    rank, size = tt.rank(), tt.size()
    handle = tt.allreduce_async(torch.full((3,), float(rank + 1)), op=tt.Sum,
                                name="from.torch")
    from_tf = tft.allreduce(tf.fill([3], float(rank + 1)), op=tft.Sum,
                            name="from.tf")
    from_torch = tt.synchronize(handle)
    want = size * (size + 1) / 2
    expect(np.all(from_tf.numpy() == want), f"tf: {from_tf.numpy()}")
    expect(bool(torch.all(from_torch == want)), f"torch: {from_torch}")
    tft.shutdown()
    expect(not tt.is_initialized(), "shutdown() stops it for both")


def setup():
    tt.init()
    return tt


if __name__ == "__main__":
    run(globals(), setup=setup)
