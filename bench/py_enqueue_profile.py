"""Where one small tensor's time goes on the Python side: times
allreduce_async_ + synchronize of py_allreduce_bench's 1,000 small tensors
in one process, then profiles a few steps with cProfile (tottime per
function: the binding's Python layers against its native calls).

    mpirun -np 1 --bind-to none /usr/bin/python3 bench/py_enqueue_profile.py terse
    mpirun -np 1 --bind-to none /opt/terse-horovod-venv/bin/python \\
        bench/py_enqueue_profile.py horovod

(terse needs PYTHONPATH=bindings/python:bazel-bin/bindings/python.) One
rank, so nothing waits for other ranks: what is left is the cost of the
calls themselves. cProfile slows the Python layers more than the native
ones, so read its table for shares, the first line for the time. Not a
test.
"""

import cProfile
import io
import os
import pstats
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from py_allreduce_bench import _small_sizes  # noqa: E402


def main():
    import torch
    library = sys.argv[1] if len(sys.argv) > 1 else "terse"
    if library == "terse":
        import terse.torch as lib
    elif library == "horovod":
        import horovod.torch as lib
    else:
        raise SystemExit(f"library must be terse or horovod, not {library!r}")
    torch.set_num_threads(1)
    lib.init()
    sizes = _small_sizes()
    tensors = [torch.ones(n) for n in sizes]
    names = [f"small.{i}" for i in range(len(sizes))]

    def step():
        handles = [lib.allreduce_async_(t, name=n, op=lib.Sum)
                   for t, n in zip(tensors, names)]
        enqueued = time.perf_counter()
        for h in handles:
            lib.synchronize(h)
        return enqueued

    for _ in range(3):
        step()
    total, enqueue = [], []
    for _ in range(15):
        start = time.perf_counter()
        enqueued = step()
        total.append(time.perf_counter() - start)
        enqueue.append(enqueued - start)
    n = len(sizes)
    print(f"{library}, 1 rank, {n} tensors: step {statistics.median(total) * 1e3:.1f}"
          f" ms, enqueue {statistics.median(enqueue) * 1e6 / n:.1f} us/tensor, "
          f"synchronize {(statistics.median(total) - statistics.median(enqueue)) * 1e6 / n:.1f}"
          " us/tensor (medians of 15 steps)")
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(5):
        step()
    profile.disable()
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(12)
    print(out.getvalue())
    lib.shutdown()


if __name__ == "__main__":
    main()
