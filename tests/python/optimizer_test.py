"""DistributedOptimizer under mpirun.

Equivalence: with op=Average and no compression, N steps of data-parallel
training give the parameters that one process gets training on the
concatenated global batch (every rank computes that reference itself), for
SGD with momentum and for Adam, with backward_passes_per_step 1 and 2 (the
loss scaled by 1/2 per pass, as gradient accumulation requires).
Also: parameters without a gradient on some ranks do not stall anyone, and
misuse raises errors that name the problem.
"""

import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

import terse.torch as tt
from mpi_testlib import expect, expect_raises, run

STEPS = 6
LOCAL_BATCH = 8


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 3, 3)
        self.fc1 = nn.Linear(3 * 4 * 4, 16)
        self.fc2 = nn.Linear(16, 5)

    def forward(self, x):
        x = torch.tanh(self.conv(x))
        return self.fc2(torch.tanh(self.fc1(x.flatten(1))))


def global_batch(step):
    g = torch.Generator().manual_seed(100 + step)
    n = LOCAL_BATCH * tt.size()
    return (torch.randn(n, 1, 6, 6, generator=g),
            torch.randint(0, 5, (n,), generator=g))


def local_slice(t):
    r = tt.rank()
    return t[r * LOCAL_BATCH:(r + 1) * LOCAL_BATCH]


def make_optimizer(kind, params):
    if kind == "sgd":
        return torch.optim.SGD(params, lr=0.1, momentum=0.9,
                               weight_decay=1e-3)
    return torch.optim.Adam(params, lr=0.01)


def reference_run(kind):
    torch.manual_seed(0)
    model = Model()
    optimizer = make_optimizer(kind, model.parameters())
    for step in range(STEPS):
        x, y = global_batch(step)
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    return model


def distributed_run(kind, passes):
    # Only rank 0 starts from the reference's weights: the broadcast must
    # bring them to the others.
    torch.manual_seed(0 if tt.rank() == 0 else 1234 + tt.rank())
    model = Model()
    tt.broadcast_parameters(model.state_dict(), root_rank=0)
    torch.manual_seed(0)
    expect(all(torch.equal(a, b) for a, b in zip(
        model.state_dict().values(), Model().state_dict().values())),
        "broadcast_parameters gave rank 0's initial weights")
    optimizer = tt.DistributedOptimizer(
        make_optimizer(kind, model.parameters()),
        named_parameters=model.named_parameters(),
        backward_passes_per_step=passes)
    expect(isinstance(optimizer, type(make_optimizer(kind, [nn.Parameter(
        torch.zeros(1))]))), "the wrapper is an instance of the wrapped class")
    for step in range(STEPS):
        x, y = global_batch(step)
        x, y = local_slice(x), local_slice(y)
        optimizer.zero_grad()
        micro = LOCAL_BATCH // passes
        for p in range(passes):
            part = slice(p * micro, (p + 1) * micro)
            loss = F.cross_entropy(model(x[part]), y[part]) / passes
            loss.backward()
        optimizer.step()
    return model


def check_same(model, reference, what):
    for (name, a), (_, b) in zip(model.named_parameters(),
                                 reference.named_parameters()):
        diff = (a - b).abs().max().item()
        expect(diff < 2e-5, f"{what}: {name} differs by {diff}")


def test_equivalence_sgd(_):
    check_same(distributed_run("sgd", 1), reference_run("sgd"), "sgd")


def test_equivalence_adam(_):
    check_same(distributed_run("adam", 1), reference_run("adam"), "adam")


def test_equivalence_two_backward_passes(_):
    check_same(distributed_run("sgd", 2), reference_run("sgd"), "sgd bpps=2")
    check_same(distributed_run("adam", 2), reference_run("adam"),
               "adam bpps=2")


def test_sum_and_predivide(_):
    for op, factor, want in ((tt.Sum, 1.0, 1.0),
                             (tt.Average, 4.0, 1.0 / tt.size())):
        w = nn.Parameter(torch.zeros(4))
        optimizer = tt.DistributedOptimizer(
            torch.optim.SGD([w], lr=1.0), named_parameters=[("w", w)], op=op,
            gradient_predivide_factor=factor)
        optimizer.zero_grad()
        (w * float(tt.rank() + 1)).sum().backward()
        optimizer.synchronize()
        total = sum(r + 1 for r in range(tt.size()))
        expect(torch.allclose(w.grad, torch.full((4,), total * want)),
               f"op {op} predivide {factor}: grad {w.grad}")
        with optimizer.skip_synchronize():
            optimizer.step()


def test_parameter_without_gradient_on_some_ranks(_):
    torch.manual_seed(0)
    used = nn.Linear(3, 2)
    extra = nn.Linear(3, 2)  # Only rank 0 uses it.
    frozen = nn.Parameter(torch.ones(2), requires_grad=False)
    params = list(used.parameters()) + list(extra.parameters()) + [frozen]
    names = ([("used." + n, p) for n, p in used.named_parameters()] +
             [("extra." + n, p) for n, p in extra.named_parameters()] +
             [("frozen", frozen)])
    optimizer = tt.DistributedOptimizer(torch.optim.SGD(params, lr=0.1),
                                        named_parameters=names)
    for _ in range(3):
        optimizer.zero_grad()
        loss = used(torch.ones(1, 3)).sum()
        if tt.rank() == 0:
            loss = loss + extra.weight.sum()
        loss.backward()
        optimizer.step()
    # rank 0's gradient of extra.weight is ones; the others contributed
    # zeros; extra.bias had no gradient anywhere and was zero-filled.
    expect(torch.allclose(extra.weight.grad,
                          torch.full((2, 3), 1.0 / tt.size())),
           f"extra.weight.grad {extra.weight.grad}")
    expect(torch.equal(extra.bias.grad, torch.zeros(2)), "extra.bias.grad")
    expect(frozen.grad is None and torch.equal(frozen, torch.ones(2)),
           "a frozen parameter is left alone")
    gathered = tt.allgather(extra.weight.detach().reshape(1, -1),
                            name="extra.check")
    expect(all(torch.equal(gathered[0], row) for row in gathered),
           "every rank holds the same extra.weight")


def test_misuse_names_the_problem(_):
    w = nn.Parameter(torch.zeros(3))
    optimizer = tt.DistributedOptimizer(torch.optim.SGD([w], lr=0.1),
                                        named_parameters=[("w", w)])
    (w * 2).sum().backward()
    expect_raises(RuntimeError, ["zero_grad", "step"], optimizer.zero_grad)
    expect_raises(RuntimeError, ["backward_passes_per_step"],
                  lambda: (w * 2).sum().backward())
    optimizer.synchronize()
    expect(torch.allclose(w.grad, torch.full((3,), 2.0)), f"grad {w.grad}")
    expect_raises(ValueError, ["not in named_parameters"],
                  tt.DistributedOptimizer,
                  torch.optim.SGD([w, nn.Parameter(torch.zeros(1))], lr=1),
                  named_parameters=[("w", w)])
    # Per-call compression: any choice is accepted (it travels with each
    # gradient's allreduce; hvd_compat_test checks what it does).
    tt.DistributedOptimizer(torch.optim.SGD([w], lr=1),
                            named_parameters=[("w", w)],
                            compression=tt.Compression.topk(cf=100))
    expect_raises(ValueError, ["unknown compressor"], tt.DistributedOptimizer,
                  torch.optim.SGD([w], lr=1), named_parameters=[("w", w)],
                  compression="nope")
    expect_raises(ValueError, ["more than once"], tt.DistributedOptimizer,
                  torch.optim.SGD([w], lr=1),
                  named_parameters=[("w", w), ("w", w)])


def test_state_dict_round_trip(_):
    model = Model()
    optimizer = tt.DistributedOptimizer(
        torch.optim.Adam(model.parameters(), lr=0.01),
        named_parameters=model.named_parameters())
    x, y = global_batch(0)
    optimizer.zero_grad()
    F.cross_entropy(model(local_slice(x)), local_slice(y)).backward()
    optimizer.step()
    state = optimizer.state_dict()
    engine = state["terse"]["engine"]
    expect(state["terse"]["steps"] == 1 and engine["size"] == tt.size() and
           isinstance(engine["states"][tt.rank()], bytes),
           f"terse state {state['terse']}")
    expect(state["terse"]["engine_compression"] ==
           tt.Compression.from_env().spec(), "engine compression recorded")
    fresh = tt.DistributedOptimizer(
        torch.optim.Adam(model.parameters(), lr=0.01),
        named_parameters=model.named_parameters())
    fresh.load_state_dict(copy.deepcopy(state))
    expect(fresh.terse_steps == 1, "steps restored")
    expect(torch.equal(fresh.state_dict()["state"][0]["exp_avg"],
                       state["state"][0]["exp_avg"]), "Adam state restored")


def test_engine_reports_and_learning_rate_drops(_):
    sent_before = tt.bytes_sent()
    model = Model()
    optimizer = tt.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1),
        named_parameters=model.named_parameters())
    schedule = torch.optim.lr_scheduler.StepLR(optimizer, 2, gamma=0.1)
    for step in range(5):
        x, y = global_batch(step)
        optimizer.zero_grad()
        F.cross_entropy(model(local_slice(x)), local_slice(y)).backward()
        optimizer.step()
        schedule.step()
    # Drops after steps 2 and 4, seen when steps 3 and 5 enqueue.
    expect(optimizer._terse_lr_drops == 2,
           f"learning-rate drops seen: {optimizer._terse_lr_drops}")
    expect(tt.bytes_sent() > sent_before, "bytes sent grew")
    reports = tt.bucket_reports()
    expect(reports and all(r["steps"] >= 1 and r["bytes"] > 0
                           for r in reports), f"bucket reports {reports}")
    expect(optimizer.terse_bytes_reduced ==
           5 * 4 * sum(p.numel() for p in model.parameters()),
           "gradient bytes reduced")


if __name__ == "__main__":
    def setup():
        tt.init()
        return object()
    run(globals(), setup=setup, teardown=lambda _: tt.shutdown())
