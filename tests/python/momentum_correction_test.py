"""TERSE_MOMENTUM_CORRECTION under mpirun (engine/momentum_correction.h).

With the momentum applied by terse before the allreduce and plain SGD in the
wrapped optimizer, dense training equals one process running
torch.optim.SGD(momentum=0.9) on the concatenated global batch: the average
over ranks of every rank's velocity is the velocity of the averaged gradient.
An optimizer that would apply momentum a second time is refused.
"""

import torch
import torch.nn.functional as F

import terse.torch as tt
from mpi_testlib import expect, expect_raises, run
from optimizer_test import STEPS, Model, check_same, global_batch, local_slice

MOMENTUM = 0.9


def test_dense_training_equals_momentum_sgd(_):
    torch.manual_seed(0)
    reference = Model()
    sgd = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=MOMENTUM)
    for step in range(STEPS):
        x, y = global_batch(step)
        sgd.zero_grad()
        F.cross_entropy(reference(x), y).backward()
        sgd.step()

    torch.manual_seed(0)
    model = Model()
    optimizer = tt.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1),
        named_parameters=model.named_parameters())
    for step in range(STEPS):
        x, y = global_batch(step)
        optimizer.zero_grad()
        F.cross_entropy(model(local_slice(x)), local_slice(y)).backward()
        optimizer.step()
    check_same(model, reference, "momentum correction")


def test_optimizer_momentum_is_refused(_):
    model = Model()
    expect_raises(ValueError, ["TERSE_MOMENTUM_CORRECTION=0.9",
                               "param group 0", "momentum=0.5"],
                  tt.DistributedOptimizer,
                  torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5),
                  named_parameters=model.named_parameters())
    expect(tt.momentum_correction() == MOMENTUM, "the engine's momentum")


if __name__ == "__main__":
    def setup():
        tt.init(config={"TERSE_MOMENTUM_CORRECTION": str(MOMENTUM)})
        return object()
    run(globals(), setup=setup, teardown=lambda _: tt.shutdown())
