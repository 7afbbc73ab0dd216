"""terse.optim under mpirun, wrapped by terse.torch.DistributedOptimizer.

Every rank trains on its own data slice; the wrapper averages the gradients,
so each rank's preconditioner sees the same history and every rank ends with
bit-identical parameters (checked by allgather) and an identical optimizer
state. The result also tracks a single process training on the global batch
(same preconditioner, the averaged gradient equal up to rounding).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

import terse.optim as optim
import terse.torch as tt
from mpi_testlib import expect, run

STEPS = 8
LOCAL_BATCH = 8


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(12, 16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


def batch(step):
    g = torch.Generator().manual_seed(300 + step)
    n = LOCAL_BATCH * tt.size()
    return torch.randn(n, 12, generator=g), torch.randint(0, 4, (n,),
                                                          generator=g)


def local(t):
    r = tt.rank()
    return t[r * LOCAL_BATCH:(r + 1) * LOCAL_BATCH]


OPTIMIZERS = {
    "mfac": lambda p: optim.MFAC(p, lr=0.05, damp=1e-2, m=4, momentum=0.5,
                                 weight_decay=1e-3),
    "sparse_mfac": lambda p: optim.SparseMFAC(p, lr=0.05, damp=1e-2, m=4,
                                              density=0.1),
    "sparse_mfac_bf16": lambda p: optim.SparseMFAC(
        p, lr=0.05, damp=1e-2, m=4, density=0.1, storage="block16_bf16"),
    "ggt": lambda p: optim.GGT(p, lr=0.01, window=4, eps=1e-2, beta1=0.5),
    "sparse_ggt": lambda p: optim.SparseGGT(p, lr=0.01, window=4, eps=1e-2,
                                            density=0.1),
}


def train(kind, distributed):
    torch.manual_seed(0)
    model = Model()
    opt = OPTIMIZERS[kind](model.parameters())
    if distributed:
        opt = tt.DistributedOptimizer(
            opt, named_parameters=model.named_parameters())
    for step in range(STEPS):
        x, y = batch(step)
        if distributed:
            x, y = local(x), local(y)
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    return model, opt


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def check_identical_on_every_rank(tensor, what):
    gathered = tt.allgather(tensor.reshape(1, -1), name=f"check.{what}")
    expect(all(torch.equal(gathered[0], row) for row in gathered),
           f"{what}: ranks hold different values")


def make_test(kind):
    def test(_):
        model, opt = train(kind, distributed=True)
        expect(isinstance(opt, type(OPTIMIZERS[kind](
            [nn.Parameter(torch.zeros(1))]))), "wrapper keeps the class")
        expect(opt.efcp_steps == STEPS, f"steps {opt.efcp_steps}")
        params = flat(model)
        check_identical_on_every_rank(params, f"{kind}.params")
        blob = opt.state_dict()["efcp"]["blob"]
        check_identical_on_every_rank(
            torch.frombuffer(bytearray(blob), dtype=torch.uint8),
            f"{kind}.state")
        reference, _ = train(kind, distributed=False)
        diff = (params - flat(reference)).abs().max().item()
        expect(diff < 1e-3, f"{kind}: differs from the single-process "
               f"global-batch run by {diff}")
    test.__name__ = f"test_{kind}"
    return test


for _kind in OPTIMIZERS:
    globals()[f"test_{_kind}"] = make_test(_kind)


def test_broadcast_optimizer_state(_):
    # Rank 0 trains a few steps alone; broadcasting its state (and the
    # parameters) makes every rank continue identically.
    torch.manual_seed(0)
    model = Model()
    opt = optim.SparseMFAC(model.parameters(), lr=0.05, damp=1e-2, m=4,
                           density=0.1)
    if tt.rank() == 0:
        for step in range(3):
            x, y = batch(step)
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
    tt.broadcast_parameters(model.state_dict(), root_rank=0)
    tt.broadcast_optimizer_state(opt, root_rank=0)
    expect(opt.efcp_steps == 3, f"steps after broadcast {opt.efcp_steps}")
    opt = tt.DistributedOptimizer(opt,
                                  named_parameters=model.named_parameters())
    for step in range(3, 6):
        x, y = batch(step)
        opt.zero_grad()
        F.cross_entropy(model(local(x)), local(y)).backward()
        opt.step()
    check_identical_on_every_rank(flat(model), "broadcast.params")


if __name__ == "__main__":
    def setup():
        tt.init()
        return object()
    run(globals(), setup=setup, teardown=lambda _: tt.shutdown())
