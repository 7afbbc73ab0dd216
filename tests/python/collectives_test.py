"""terse.torch collectives under mpirun against references every rank computes
for itself: each rank's input is a function of (rank, case), so every rank
knows every other rank's tensor and reduces them in float64 / exact integers.

Inputs are small integers (exact in every dtype, fp16 and bf16 included), so
sums, averages over 2 or 4 ranks, minima and maxima are exact and compared
bit for bit; one case with random float32 uses a tolerance.
"""

import time

import torch

import terse.torch as tt
from mpi_testlib import expect, expect_raises, run

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64,
          torch.int32, torch.int64, torch.uint8, torch.int8, torch.int16]
FLOATS = {torch.float32, torch.float16, torch.bfloat16, torch.float64}


def rank_input(rank, dtype, shape, case):
    """Small integers: in [0, 20] for uint8, else [-10, 10]."""
    g = torch.Generator().manual_seed(1000 * case + rank)
    low = 0 if dtype == torch.uint8 else -10
    return torch.randint(low, 11, shape, generator=g).to(dtype)


def all_inputs(dtype, shape, case):
    return [rank_input(r, dtype, shape, case).to(torch.float64)
            for r in range(tt.size())]


def check_equal(got, want, what):
    expect(got.shape == want.shape,
           f"{what}: shape {tuple(got.shape)}, want {tuple(want.shape)}")
    expect(torch.equal(got.to(torch.float64), want.to(torch.float64)),
           f"{what}: got {got.flatten()[:8].tolist()}, want "
           f"{want.flatten()[:8].tolist()}")


def test_allreduce_every_dtype_and_op(_):
    shape = (3, 5)
    for case, dtype in enumerate(DTYPES):
        inputs = all_inputs(dtype, shape, case)
        stacked = torch.stack(inputs)
        mine = rank_input(tt.rank(), dtype, shape, case)
        refs = {tt.Sum: stacked.sum(0), tt.Min: stacked.min(0).values,
                tt.Max: stacked.max(0).values}
        if dtype in FLOATS:
            refs[tt.Average] = stacked.sum(0) / tt.size()
        for op, want in refs.items():
            name = f"ar.{dtype}.{op}"
            out = tt.allreduce(mine, name=name, op=op)
            expect(out.dtype == dtype, f"{name}: dtype {out.dtype}")
            check_equal(out, want, name)
            # Out of place: the input is untouched.
            check_equal(mine, inputs[tt.rank()], f"{name} input")


def test_allreduce_in_place_and_non_contiguous(_):
    for case, dtype in enumerate(DTYPES, start=100):
        want = torch.stack(all_inputs(dtype, (4, 6), case)).sum(0)
        t = rank_input(tt.rank(), dtype, (4, 6), case)
        result = tt.allreduce_(t, name=f"inplace.{dtype}", op=tt.Sum)
        expect(result is t, "allreduce_ returns its argument")
        check_equal(t, want, f"allreduce_ {dtype}")
        # A transposed (non-contiguous) view is reduced in place too.
        base = rank_input(tt.rank(), dtype, (4, 6), case)
        view = base.t()
        expect(not view.is_contiguous(), "the view is non-contiguous")
        tt.allreduce_(view, name=f"inplace.t.{dtype}", op=tt.Sum)
        check_equal(base, want, f"allreduce_ transposed {dtype}")


def test_in_place_fast_path_equals_the_general_path(_):
    """allreduce_async_ of a named contiguous float CPU tensor takes the
    per-call fast path; a transposed view of the same values takes the
    general one. Average with factors: both equal the closed form (small
    integers, exact) bit for bit, and the handle keeps the tensor alive."""
    for case, dtype in enumerate(sorted(FLOATS, key=str), start=500):
        want = (torch.stack(all_inputs(dtype, (6, 4), case)).sum(0)
                * 0.5 * 4.0 / tt.size())
        fast = rank_input(tt.rank(), dtype, (6, 4), case)
        h = tt.allreduce_async_(fast, name=f"fast.{dtype}",
                                prescale_factor=0.5, postscale_factor=4.0)
        base = rank_input(tt.rank(), dtype, (4, 6), case + 50).t()
        base.copy_(fast)
        expect(not base.is_contiguous(), "the view is non-contiguous")
        g = tt.allreduce_async_(base, name=f"general.{dtype}",
                                prescale_factor=0.5, postscale_factor=4.0)
        got = tt.synchronize(h)
        expect(got is fast, "synchronize returns the tensor")
        tt.synchronize(g)
        check_equal(fast, want, f"fast path {dtype}")
        check_equal(base, want, f"general path {dtype}")
        s = tt.allreduce_async_(torch.ones(3, dtype=dtype), name=f"drop.{dtype}",
                                op=tt.Sum)
        check_equal(tt.synchronize(s), torch.full((3,), float(tt.size())),
                    f"dropped reference {dtype}")


def test_allreduce_scaling_and_random_floats(_):
    g = torch.Generator().manual_seed(7 + tt.rank())
    mine = torch.randn(1000, generator=g)
    everyone = [torch.randn(1000, generator=torch.Generator().manual_seed(
        7 + r)).double() for r in range(tt.size())]
    total = torch.stack(everyone).sum(0)
    out = tt.allreduce(mine, name="random.avg")
    expect(torch.allclose(out.double(), total / tt.size(), rtol=1e-6,
                          atol=1e-6), "average of random floats")
    out = tt.allreduce(mine, name="random.scaled", op=tt.Sum,
                       prescale_factor=0.5, postscale_factor=3.0)
    expect(torch.allclose(out.double(), 1.5 * total, rtol=1e-5, atol=1e-5),
           "prescale 0.5, postscale 3")
    # Zero elements and a scalar.
    empty = tt.allreduce(torch.zeros(0), name="empty", op=tt.Sum)
    expect(empty.numel() == 0, "empty allreduce")
    scalar = tt.allreduce(torch.tensor(float(tt.rank())), name="scalar",
                          op=tt.Sum)
    expect(scalar.dim() == 0 and scalar.item() ==
           sum(range(tt.size())), f"scalar sum {scalar}")


def test_async_handles(_):
    n = 12
    tensors = [rank_input(tt.rank(), torch.float32, (100 + i,), 300 + i)
               for i in range(n)]
    handles = [tt.allreduce_async(t, name=f"async.{i}", op=tt.Sum)
               for i, t in enumerate(tensors)]
    in_place = [tt.allreduce_async_(t.clone(), name=f"async_.{i}", op=tt.Max)
                for i, t in enumerate(tensors)]
    del tensors  # The handle table keeps the memory alive.
    deadline = time.time() + 60
    while not all(tt.poll(h) for h in handles + in_place):
        expect(time.time() < deadline, "handles never completed")
        time.sleep(0.001)
    for i, (h, hi) in enumerate(zip(handles, in_place)):
        inputs = torch.stack(all_inputs(torch.float32, (100 + i,), 300 + i))
        check_equal(tt.synchronize(h), inputs.sum(0), f"async {i}")
        check_equal(tt.synchronize(hi), inputs.max(0).values, f"async_ {i}")
    expect_raises(tt.TerseError, ["handle"], tt.synchronize, handles[0])
    expect_raises(tt.TerseError, ["handle"], tt.poll, 123456789)


def test_wait_releases_the_gil(_):
    # Rank 0 waits for an allreduce the others join 0.5 s late; a Python
    # thread must keep running meanwhile.
    import threading
    counter = [0]
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            counter[0] += 1

    if tt.rank() != 0:
        time.sleep(0.5)
    thread = threading.Thread(target=spin)
    thread.start()
    time.sleep(0.01)
    before = counter[0]
    tt.allreduce(torch.ones(4), name="gil", op=tt.Sum)
    during = counter[0] - before
    stop.set()
    thread.join()
    if tt.rank() == 0:
        expect(during > 1000, f"only {during} loop iterations while waiting")


def test_allgather_every_dtype(_):
    size = tt.size()
    for case, dtype in enumerate(DTYPES, start=400):
        # Rank r contributes r + 1 rows of 3.
        pieces = [rank_input(r, dtype, (r + 1, 3), case) for r in range(size)]
        out = tt.allgather(pieces[tt.rank()], name=f"ag.{dtype}")
        expect(out.dtype == dtype, f"allgather {dtype}: dtype {out.dtype}")
        check_equal(out, torch.cat(pieces), f"allgather {dtype}")
    out = tt.allgather(torch.tensor(float(tt.rank())), name="ag.scalar")
    check_equal(out, torch.arange(size, dtype=torch.float64), "scalar")
    handle = tt.allgather_async(torch.full((2, 2), tt.rank()), name="ag.a")
    out = tt.synchronize(handle)
    want = torch.cat([torch.full((2, 2), r) for r in range(size)])
    check_equal(out, want, "allgather_async")


def test_broadcast_every_dtype_and_root(_):
    for root in range(tt.size()):
        for case, dtype in enumerate(DTYPES, start=500):
            want = rank_input(root, dtype, (7, 2), case)
            mine = rank_input(tt.rank(), dtype, (7, 2), case)
            out = tt.broadcast(mine, root, name=f"bc.{root}.{dtype}")
            check_equal(out, want, f"broadcast from {root} {dtype}")
            check_equal(mine, rank_input(tt.rank(), dtype, (7, 2), case),
                        "broadcast leaves its input alone")
            tt.broadcast_(mine, root, name=f"bc_.{root}.{dtype}")
            check_equal(mine, want, f"broadcast_ from {root} {dtype}")
    base = torch.arange(12.0).reshape(3, 4) * (tt.rank() + 1)
    tt.synchronize(tt.broadcast_async_(base.t(), 0, name="bc.t"))
    check_equal(base, torch.arange(12.0).reshape(3, 4), "broadcast_ view")


def test_objects_and_parameters(_):
    root = tt.size() - 1
    obj = {"rank": tt.rank(), "t": torch.arange(5) * tt.rank(), "s": "x"}
    got = tt.broadcast_object(obj, root_rank=root)
    expect(got["rank"] == root and torch.equal(got["t"],
                                               torch.arange(5) * root),
           f"broadcast_object: {got}")
    gathered = tt.allgather_object(("r", tt.rank()))
    expect(gathered == [("r", r) for r in range(tt.size())],
           f"allgather_object: {gathered}")

    torch.manual_seed(tt.rank())
    model = torch.nn.Sequential(torch.nn.Linear(4, 3),
                                torch.nn.BatchNorm1d(3))
    model(torch.randn(8, 4))  # Rank-dependent running statistics.
    tt.broadcast_parameters(model.state_dict(), root_rank=0)
    torch.manual_seed(0)
    reference = torch.nn.Sequential(torch.nn.Linear(4, 3),
                                    torch.nn.BatchNorm1d(3))
    reference(torch.randn(8, 4))
    for (name, a), (_, b) in zip(model.state_dict().items(),
                                 reference.state_dict().items()):
        check_equal(a, b, f"broadcast_parameters {name}")

    # Optimizer state: only root has taken a step.
    params = [torch.nn.Parameter(torch.ones(3))]
    optimizer = torch.optim.Adam(params, lr=0.1)
    if tt.rank() == 0:
        params[0].grad = torch.full((3,), 2.0)
        optimizer.step()
    tt.broadcast_optimizer_state(optimizer, root_rank=0)
    state = optimizer.state_dict()["state"]
    expect(0 in state and torch.equal(state[0]["exp_avg"],
                                      torch.full((3,), 0.2)),
           f"broadcast_optimizer_state: {state}")


def test_join_uneven_work(_):
    # Rank r runs r + 1 allreduces, then joins: allreduce i sees the ranks
    # still working (r >= i) plus zeros from those that joined.
    for i in range(tt.rank() + 1):
        out = tt.allreduce(torch.ones(3), name=f"join.{i}", op=tt.Sum)
        check_equal(out, torch.full((3,), float(tt.size() - i)),
                    f"allreduce {i} with joined ranks")
    last = tt.join()
    expect(0 <= last < tt.size(), f"join returned {last}")


def test_barrier_and_queries(_):
    tt.barrier()
    expect(0 <= tt.local_rank() < tt.local_size() <= tt.size(),
           "local rank/size")


if __name__ == "__main__":
    def setup():
        tt.init()
        return object()
    run(globals(), setup=setup, teardown=lambda _: tt.shutdown())
