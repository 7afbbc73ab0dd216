"""terse.torch.elastic on a fixed set of ranks (mpirun, 2 and 4 ranks).

Oracle: the same training without a failure. A collective that fails on
every rank (shapes that differ across ranks) in the middle of a step, after
the optimizer has already moved the parameters, must roll every rank back
to the last commit; training then ends bit-identical to the uninterrupted
run (CPU float64, fixed batches).
"""

import torch

import terse.torch as hvd
from mpi_testlib import expect, expect_raises, run

STEPS = 6


def batch(step, rank):
    g = torch.Generator().manual_seed(100 * step + rank)
    return (torch.randn(5, 3, generator=g, dtype=torch.float64),
            torch.randn(5, 1, generator=g, dtype=torch.float64))


def make():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1).double()
    opt = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
        named_parameters=model.named_parameters())
    return model, opt


def train_steps(model, opt, state, fail_at, failed):
    for step in range(state.step, STEPS):
        x, y = batch(step, hvd.rank())
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        if step == fail_at and not failed:
            failed.append(step)
            # Every rank hears of the mismatch: each rolls back.
            hvd.allreduce(torch.ones(hvd.rank() + 1), name="elastic.bad")
        state.step = step + 1
        if state.step % 2 == 0:
            state.commit()


def test_failed_collective_restores_last_commit(_):
    model_ref, opt_ref = make()
    ref_state = hvd.elastic.TorchState(model_ref, opt_ref, step=0)
    hvd.elastic.run(lambda s: train_steps(model_ref, opt_ref, s, -1, []))(
        ref_state)

    model, opt = make()
    state = hvd.elastic.TorchState(model, opt, step=0)
    resets, failed = [], []
    state.register_reset_callbacks([lambda: resets.append(state.step)])
    hvd.elastic.run(lambda s: train_steps(model, opt, s, 3, failed))(state)
    expect(failed == [3] and resets == [2],
           f"one failure at step 3, reset to step 2: {failed} {resets}")
    for p, q in zip(model.parameters(), model_ref.parameters()):
        expect(torch.equal(p, q), f"parameters differ: {p} vs {q}")
    expect(state.step == STEPS, "finished")


def test_object_state_syncs_from_rank_0(_):
    state = hvd.elastic.ObjectState(value=hvd.rank() + 10, items=[hvd.rank()])
    state.sync()
    expect(state.value == 10 and state.items == [0], "rank 0's values")
    state.value = 99
    state.restore()
    expect(state.value == 10, "restore returns to the last sync/commit")
    state.value = 7
    state.commit()
    state.value = 8
    state.restore()
    expect(state.value == 7, "restore returns to the commit")


def test_repeated_failure_is_raised(_):
    state = hvd.elastic.ObjectState(n=0)
    calls = []

    @hvd.elastic.run
    def always_fails(s):
        calls.append(1)
        hvd.allreduce(torch.ones(hvd.rank() + 1),
                      name=f"elastic.always.{len(calls)}")

    expect_raises(hvd.HorovodInternalError, ["elastic.always"],
                  always_fails, state)
    expect(len(calls) == 6, f"5 restores, then raised: {len(calls)} calls")


def test_elastic_sampler_resumes_mid_epoch_after_restore(_):
    size, rank = hvd.size(), hvd.rank()
    data = list(range(23))
    sampler = hvd.elastic.ElasticSampler(data, shuffle=True, seed=4)
    state = hvd.elastic.TorchState(sampler=sampler, batches=0)
    sampler.set_epoch(1)
    everyone = hvd.allgather_object(list(sampler))
    order = list(range(23))
    import random
    random.Random(5).shuffle(order)
    per_rank = -(-23 // size)
    padded = order + order[:per_rank * size - 23]
    expect(everyone == [padded[r::size] for r in range(size)],
           f"dealt round-robin: {everyone}")
    sampler.record_batch(0, 2)  # 2 per rank processed.
    state.commit()
    sampler.record_batch(1, 2)
    state.restore()  # Back to the commit: 2 * size processed.
    rest = order[2 * size:]
    n = -(-len(rest) // size)
    rest_padded = (rest * 2)[:n * size]
    expect(list(sampler) == rest_padded[rank::size] and len(sampler) == n,
           "after restore the epoch resumes after the committed batch")


def setup():
    hvd.init()
    return "initialised"


if __name__ == "__main__":
    run(globals(), setup=setup)
