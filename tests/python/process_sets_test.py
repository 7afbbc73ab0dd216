"""Horovod 0.28.1's process sets in terse.torch, under mpirun (2 and 4 ranks).

Static sets even = ranks 0, 2, ... and odd = ranks 1, 3, ... at init, and
dynamic ones (TERSE_DYNAMIC_PROCESS_SETS=1). Every rank's input is a
function of (rank, case), so each rank builds every member's tensor and
computes the reference itself with numpy (float64 sums, numpy slicing for
allgather / alltoall / reducescatter, the mean of the members' gradients for
DistributedOptimizer); error-feedback state is checked by replay: the
steps after a save equal, bitwise, the same steps after loading it.
"""

import os

import numpy as np
import torch

import terse.torch as hvd
from mpi_testlib import expect, expect_raises, run


def member_floats(rank, n, case):
    return np.random.default_rng(1000 * case + rank).standard_normal(n)


def member_ints(rank, n, case):
    return np.random.default_rng(77 * case + rank).integers(-9, 10, n)


class Sets:
    def __init__(self):
        # Static sets are given to init(), before size() is known.
        size = int(os.environ["OMPI_COMM_WORLD_SIZE"])
        rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
        self.even = hvd.ProcessSet(list(range(0, size, 2)))
        self.odd = hvd.ProcessSet(list(range(1, size, 2)))
        hvd.init(process_sets=[self.even, self.odd],
                 config={"TERSE_DYNAMIC_PROCESS_SETS": "1"})
        self.mine = self.even if rank % 2 == 0 else self.odd
        self.other = self.odd if rank % 2 == 0 else self.even


def test_a_static_sets(s):
    rank = hvd.rank()
    expect(s.even.process_set_id == 1 and s.odd.process_set_id == 2,
           f"ids {s.even.process_set_id}, {s.odd.process_set_id}")
    expect(s.mine.included() and not s.other.included(), "included()")
    expect(s.mine.size() == len(s.mine.ranks), "size()")
    expect(s.mine.rank() == s.mine.ranks.index(rank), "rank() in the set")
    expect_raises(ValueError, ["not part of process set"], s.other.rank)
    expect(hvd.global_process_set.process_set_id == 0, "global id")
    expect(hvd.global_process_set.ranks == list(range(hvd.size())),
           "global ranks")


def test_allreduce(s):
    members = s.mine.ranks
    for case, op in enumerate([hvd.Sum, hvd.Average, hvd.Min, hvd.Max]):
        x = torch.from_numpy(member_floats(hvd.rank(), 9, case))
        # The same name on the global set at the same time: names are per
        # set, and the two are negotiated and fused apart.
        g = hvd.allreduce_async(torch.ones(3), name="same", op=hvd.Sum)
        got = hvd.allreduce(x, name="same", op=op, process_set=s.mine)
        expect(torch.equal(hvd.synchronize(g),
                           torch.full((3,), float(hvd.size()))), "global")
        stack = np.stack([member_floats(r, 9, case) for r in members])
        want = {hvd.Sum: stack.sum(0), hvd.Average: stack.mean(0),
                hvd.Min: stack.min(0), hvd.Max: stack.max(0)}[op]
        expect(np.allclose(got.numpy(), want, atol=1e-12),
               f"allreduce op {op} over {members}")
    # Integer Average: the set's sum divided by the set's size, truncated.
    x = torch.from_numpy(member_ints(hvd.rank(), 7, 1)).to(torch.int32)
    got = hvd.allreduce(x, name="ints", op=hvd.Average, process_set=s.mine)
    total = sum(member_ints(r, 7, 1) for r in members)
    want = np.trunc(total / len(members)).astype(np.int32)
    expect(np.array_equal(got.numpy(), want), f"int average {got} {want}")
    # In place, scaled, async.
    y = torch.from_numpy(member_floats(hvd.rank(), 5, 9))
    h = hvd.allreduce_async_(y, name="inplace", op=hvd.Sum,
                             prescale_factor=2.0, postscale_factor=0.5,
                             process_set=s.mine)
    hvd.synchronize(h)
    want = sum(member_floats(r, 5, 9) for r in members)
    expect(np.allclose(y.numpy(), want, atol=1e-12), "in-place, scaled")


def test_grouped_and_compression(s):
    members = s.mine.ranks
    xs = [torch.from_numpy(member_floats(hvd.rank(), n, 20 + n))
          for n in (1, 4, 30)]
    outs = hvd.grouped_allreduce(xs, name="grp", op=hvd.Sum,
                                 process_set=s.mine)
    for n, out in zip((1, 4, 30), outs):
        want = sum(member_floats(r, n, 20 + n) for r in members)
        expect(np.allclose(out.numpy(), want, atol=1e-12), f"grouped {n}")
    # fp16 on the wire: small integers sum exactly.
    z = torch.arange(6, dtype=torch.float32) + hvd.rank()
    got = hvd.allreduce(z, name="fp16", op=hvd.Sum, process_set=s.mine,
                        compression=hvd.Compression.fp16)
    want = sum(np.arange(6) + r for r in members)
    expect(np.array_equal(got.numpy(), want.astype(np.float32)), "fp16")


def test_allgather_and_objects(s):
    members = s.mine.ranks
    x = torch.full((hvd.rank() + 1, 2), float(hvd.rank()))
    got = hvd.allgather(x, name="gather", process_set=s.mine)
    want = np.concatenate([np.full((r + 1, 2), float(r)) for r in members])
    expect(np.array_equal(got.numpy(), want), f"allgather {got}")
    outs = hvd.grouped_allgather([x, x[:1]], name="ggather",
                                 process_set=s.mine)
    expect(np.array_equal(outs[0].numpy(), want), "grouped allgather")
    objs = hvd.allgather_object({"rank": hvd.rank()}, process_set=s.mine)
    expect(objs == [{"rank": r} for r in members], f"objects {objs}")


def test_broadcast(s):
    members = s.mine.ranks
    root = members[-1]  # A world rank.
    x = torch.full((3,), float(hvd.rank()))
    got = hvd.broadcast(x, root, name="bcast", process_set=s.mine)
    expect(torch.equal(got, torch.full((3,), float(root))), "broadcast")
    hvd.broadcast_(x, root, name="bcast_", process_set=s.mine)
    expect(torch.equal(x, torch.full((3,), float(root))), "broadcast_")
    obj = hvd.broadcast_object(("from", hvd.rank()), root_rank=root,
                               process_set=s.mine)
    expect(obj == ("from", root), f"broadcast_object {obj}")
    params = {"w": torch.full((2,), float(hvd.rank()))}
    hvd.broadcast_parameters(params, root_rank=root, process_set=s.mine)
    expect(torch.equal(params["w"], torch.full((2,), float(root))),
           "broadcast_parameters")
    outside = [r for r in range(hvd.size()) if r not in members]
    if outside:
        expect_raises(hvd.TerseError, [f"root rank {outside[0]}",
                                       "is not in process set"],
                      hvd.broadcast, x, outside[0], name="badroot",
                      process_set=s.mine)


def test_alltoall_and_reducescatter(s):
    members = s.mine.ranks
    n = len(members)
    me = s.mine.rank()
    # Member k sends (j + 1) rows of value 10 k + j to member j.
    splits = [j + 1 for j in range(n)]
    x = torch.cat([torch.full((j + 1,), float(10 * me + j))
                   for j in range(n)])
    out, received = hvd.alltoall(x, splits=splits, name="a2a",
                                 process_set=s.mine)
    want = np.concatenate([np.full(me + 1, 10.0 * k + me) for k in range(n)])
    expect(np.array_equal(out.numpy(), want), f"alltoall {out}")
    expect(received.tolist() == [me + 1] * n, f"received {received}")
    rows = 2 * n + 1
    y = torch.from_numpy(member_floats(hvd.rank(), rows, 40)).reshape(rows, 1)
    got = hvd.reducescatter(y, name="rs", op=hvd.Sum, process_set=s.mine)
    total = sum(member_floats(r, rows, 40) for r in members).reshape(rows, 1)
    base, extra = divmod(rows, n)
    offset = me * base + min(me, extra)
    count = base + (1 if me < extra else 0)
    expect(np.allclose(got.numpy(), total[offset:offset + count], atol=1e-12),
           "reducescatter")


def test_autograd(s):
    members = s.mine.ranks
    x = torch.ones(4, dtype=torch.float64, requires_grad=True)
    y = hvd.allreduce(x * (hvd.rank() + 1), name="ag", op=hvd.Sum,
                      process_set=s.mine)
    y.sum().backward()
    # The gradient of the sum is the allreduce (over the set) of ones,
    # times this rank's factor.
    want = float((hvd.rank() + 1) * len(members))
    expect(torch.allclose(x.grad, torch.full((4,), want, dtype=torch.float64)),
           f"allreduce gradient {x.grad}")


def test_distributed_optimizer(s):
    members = s.mine.ranks

    def batch(r):
        g = torch.Generator().manual_seed(500 + r)
        return (torch.randn(5, 3, generator=g, dtype=torch.float64),
                torch.randn(5, 1, generator=g, dtype=torch.float64))

    def model():
        torch.manual_seed(3)
        return torch.nn.Linear(3, 1).double()

    grads = []
    for r in members:
        m = model()
        xb, yb = batch(r)
        torch.nn.functional.mse_loss(m(xb), yb).backward()
        grads.append([p.grad.clone() for p in m.parameters()])
    m = model()
    start = [p.detach().clone() for p in m.parameters()]
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1),
                                   named_parameters=m.named_parameters(),
                                   process_set=s.mine)
    xb, yb = batch(hvd.rank())
    opt.zero_grad()
    torch.nn.functional.mse_loss(m(xb), yb).backward()
    opt.step()
    for i, p in enumerate(m.parameters()):
        mean = sum(g[i] for g in grads) / len(grads)
        expect(torch.allclose(p.detach(), start[i] - 0.1 * mean, atol=1e-12),
               f"parameter {i} after a step over {members}")


def test_barrier(s):
    hvd.barrier(process_set=s.mine)
    hvd.barrier()


def test_not_a_member(s):
    expect_raises(ValueError, [f"this rank ({hvd.rank()}) is not in process "
                               "set"],
                  hvd.allreduce, torch.ones(1), process_set=s.other)
    expect_raises(TypeError, ["ProcessSet"], hvd.allreduce, torch.ones(1),
                  process_set="evens")


def test_mismatch_names_set_and_ranks(s):
    if len(s.mine.ranks) < 2:
        return
    n = 3 if s.mine.rank() == 0 else 2
    e = expect_raises(hvd.TerseError, ["tensor 'mismatch'", "process set",
                                       "world ranks", "shape"],
                      hvd.allreduce, torch.ones(n), name="mismatch",
                      process_set=s.mine)
    expect(isinstance(e, RuntimeError), "a TerseError")
    # The set still works afterwards.
    got = hvd.allreduce(torch.ones(2), name="after", op=hvd.Sum,
                        process_set=s.mine)
    expect(torch.equal(got, torch.full((2,), float(len(s.mine.ranks)))),
           "after a mismatch")


SIZES = (20000, 17000)  # float32: above TERSE_MIN_COMPRESS_BYTES' 64 KiB.


def topk_steps(s, first, n):
    """Steps [first, first + n) of topk(cf=10) allreduces of two gradients
    on the global set and on this rank's set; returns every sum."""
    out = []
    for step in range(first, first + n):
        for ps in (hvd.global_process_set, s.mine):
            for t, size in enumerate(SIZES):
                g = member_floats(hvd.rank(), size, 50 + 7 * step + t)
                out.append(hvd.allreduce(
                    torch.from_numpy(g.astype(np.float32)), name=f"g{t}",
                    op=hvd.Sum, process_set=ps,
                    compression=hvd.Compression.topk(cf=10)).numpy())
    return out


def test_y_compression_state(s):
    """Every set's error-feedback state round-trips: the steps run after a
    save give bitwise the same sums when replayed after loading it (from
    bytes and from a file); reports name each bucket's set."""
    topk_steps(s, 0, 2)
    s.saved_state = hvd.save_compression_state()
    path = os.path.join(os.environ.get("TEST_TMPDIR", "/tmp"),
                        f"ps_state_{os.getpid()}_{hvd.rank()}.ckpt")
    hvd.save_compression_state(path)
    reference = topk_steps(s, 2, 2)
    expect(hvd.save_compression_state() != s.saved_state, "state moved")
    for source in (s.saved_state, path):
        hvd.load_compression_state(source)
        replay = topk_steps(s, 2, 2)
        expect(all(np.array_equal(a, b) for a, b in zip(reference, replay)),
               f"replay after loading {type(source).__name__}")
    os.remove(path)
    reports = hvd.bucket_reports()
    for ps in (hvd.global_process_set, s.mine):
        # Earlier tests' dense buckets report too; the topk ones are ours.
        mine = [r for r in reports if r["process_set"] == ps.process_set_id
                and r["policy"] == "topk cf=10"]
        expect(sum(r["bytes"] for r in mine) == 4 * sum(SIZES),
               f"set {ps.process_set_id} reports {mine}")
        expect(all(r["compressor"] == "topk" and r["bytes_sent"] > 0
                   for r in mine), f"set {ps.process_set_id} sent topk")
    expect(not any(r["process_set"] == s.other.process_set_id
                   for r in reports), "no report of the other set")


def test_z_dynamic(s):
    size, rank = hvd.size(), hvd.rank()
    # Every rank takes part in add/remove, members or not.
    first = list(range(size // 2 + 1))
    if len(first) == size:
        expect_raises(ValueError, ["exists"], hvd.add_process_set, first)
    else:
        ps = hvd.add_process_set(first)
        expect(ps.process_set_id == 3, f"new id {ps.process_set_id}")
        if ps.included():
            got = hvd.allreduce(torch.ones(2), name="dyn", op=hvd.Sum,
                                process_set=ps)
            expect(torch.equal(got, torch.full((2,), float(len(first)))),
                   "sum over the dynamic set")
        expect(hvd.remove_process_set(ps) is True, "removed")
    expect_raises(ValueError, ["exists"], hvd.add_process_set, s.even.ranks)
    odd_ranks = s.odd.ranks
    expect(hvd.remove_process_set(s.odd) is True, "odd removed")
    expect(s.odd.process_set_id is None, "odd unregistered")
    expect(hvd.remove_process_set(s.odd) is False, "removed twice")
    if rank % 2 == 1:
        expect_raises(ValueError, ["not registered"], hvd.allreduce,
                      torch.ones(1), process_set=s.odd)
    again = hvd.add_process_set(odd_ranks)
    # test_y's checkpoint names set 2 (odd); odd ranks are now in another
    # set of the same ranks, even ranks in the same sets as then.
    if rank % 2 == 1:
        expect_raises(hvd.TerseError,
                      ["set 2 [", f"set {again.process_set_id} ["],
                      hvd.load_compression_state, s.saved_state)
    else:
        hvd.load_compression_state(s.saved_state)
    if again.included():
        got = hvd.allreduce(torch.ones(1), name="again", op=hvd.Sum,
                            process_set=again)
        expect(got.item() == len(odd_ranks), "re-added set")
    expect(hvd.remove_process_set(hvd.global_process_set) is False,
           "the global set is not removed")
    # A rank that shuts down stops every rank's engine: wait for all.
    hvd.barrier()


if __name__ == "__main__":
    run(globals(), setup=Sets)
