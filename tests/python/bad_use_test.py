"""Misuse of terse.torch raises Python exceptions that name the problem, on
every rank, and never hangs (tests/mpirun.sh bounds the run in time).

Order matters: the checks before init() run first; the cross-rank
mismatches run last.
"""

import torch

import terse
import terse.torch as tt
from mpi_testlib import expect, expect_raises, mpi_rank

RANK = mpi_rank()


def before_init():
    expect(issubclass(tt.TerseError, RuntimeError), "TerseError is a "
           "RuntimeError")
    expect(terse.TerseError is tt.TerseError, "one TerseError class")
    expect(not tt.is_initialized(), "not initialised yet")
    for fn, args in ((tt.rank, ()), (tt.size, ()), (tt.local_rank, ()),
                     (tt.allreduce, (torch.ones(2),)),
                     (tt.allreduce_async_, (torch.ones(2),)),
                     (tt.allgather, (torch.ones(2),)),
                     (tt.broadcast_, (torch.ones(2), 0)),
                     (tt.broadcast_object, ({"a": 1},)),
                     (tt.broadcast_parameters, ({"w": torch.ones(1)},)),
                     (tt.join, ()), (tt.barrier, ())):
        expect_raises(tt.TerseError, ["init()"], fn, *args)
    w = torch.nn.Parameter(torch.ones(2))
    expect_raises(tt.TerseError, ["init()"], tt.DistributedOptimizer,
                  torch.optim.SGD([w], lr=1), [("w", w)])
    # A bad TERSE_* value is reported with its name before anything starts.
    expect_raises(tt.TerseError, ["TERSE_FUSION_THRESHOLD", "abc"], tt.init,
                  config={"TERSE_FUSION_THRESHOLD": "abc"})
    expect_raises(ValueError, ["unknown compressor", "gravac"], tt.init,
                  compression="nope")
    expect(not tt.is_initialized(), "still not initialised")


def local_errors():
    for dtype in (torch.complex64, torch.complex128):
        t = torch.zeros(3, dtype=dtype)
        expect_raises(tt.TerseError, [str(dtype), "unsupported dtype"],
                      tt.allreduce, t, name="bad.dtype")
        expect_raises(tt.TerseError, [str(dtype)], tt.broadcast_, t, 0)
        expect_raises(tt.TerseError, [str(dtype)], tt.allgather, t)
    # bool moves (broadcast, allgather) but is not reduced (docs/torch.md).
    expect_raises(tt.TerseError, ["bad.bool", "allreduce of bool"],
                  tt.allreduce, torch.ones(3, dtype=torch.bool),
                  name="bad.bool", op=tt.Sum)
    expect_raises(TypeError, ["torch.Tensor"], tt.allreduce, [1.0, 2.0])
    expect_raises(ValueError, ["reduce op"], tt.allreduce, torch.ones(1),
                  op=17)
    # Integer Average is Horovod's (truncated mean): torch_api_test checks it.
    # The same name twice in flight: the second enqueue fails at once.
    first = tt.allreduce_async(torch.ones(4), name="dup")
    expect_raises(tt.TerseError, ["dup"], tt.allreduce_async, torch.ones(4),
                  name="dup")
    expect(torch.equal(tt.synchronize(first), torch.ones(4)), "first dup ok")
    # Still usable afterwards.
    out = tt.allreduce(torch.ones(2), name="after.local", op=tt.Sum)
    expect(torch.equal(out, torch.full((2,), float(tt.size()))), "usable")


def cross_rank_errors():
    size = tt.size()
    # Broadcast from a rank that does not exist.
    expect_raises(tt.TerseError, [str(size)], tt.broadcast_,
                  torch.ones(2), size, name="bad.root")
    # Shapes that differ across ranks: every rank hears about it.
    e = expect_raises(tt.TerseError, ["mismatch.shape"], tt.allreduce,
                      torch.ones(RANK + 2), name="mismatch.shape")
    expect("shape" in str(e).lower(), f"names the shape: {e}")
    dtype = torch.float32 if RANK == 0 else torch.float64
    e = expect_raises(tt.TerseError, ["mismatch.dtype"], tt.allreduce,
                      torch.ones(3, dtype=dtype), name="mismatch.dtype")


def main():
    before_init()
    tt.init()
    expect(tt.is_initialized(), "initialised")
    tt.init()  # Same settings again: a no-op.
    local_errors()
    print(f"[rank {RANK}] ok   local errors", flush=True)
    cross_rank_errors()
    print(f"[rank {RANK}] ok   cross-rank errors", flush=True)
    tt.shutdown()
    tt.shutdown()  # Idempotent.
    expect_raises(tt.TerseError, ["init()"], tt.allreduce, torch.ones(1))
    print(f"[rank {RANK}] passed", flush=True)


if __name__ == "__main__":
    import os
    import sys
    import traceback
    try:
        main()
    except BaseException:
        sys.stderr.write(f"[rank {RANK}] FAIL\n")
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
