"""init(comm=...), Horovod's, under mpirun with 4 ranks: rank lists (pairs
{0,1} and {3,2}, each an independent terse world of 2), an mpi4py
communicator (COMM_WORLD.Split by parity: {0,2} and {1,3}), a process left
out of its list, bad values. References: the world ranks each world must
hold (from the lists and split colours), numpy sums of the members' seeded
inputs, and the members' own values for allgather and broadcast.
"""

import numpy as np
import torch

import terse.torch as hvd
from terse import basics
from mpi_testlib import expect, expect_raises, run


class Setup:
    def __init__(self):
        from mpi4py import MPI  # Initialises MPI for every rank first.
        self.MPI = MPI
        self.world_rank = MPI.COMM_WORLD.Get_rank()
        expect(MPI.COMM_WORLD.Get_size() == 4, "init_comm_test needs 4 ranks")


def inputs(world_rank, case):
    return np.random.default_rng(100 * case + world_rank).standard_normal(9)


def check_world(s, members, case):
    """terse runs on `members` (world ranks, in terse rank order)."""
    me = s.world_rank
    expect(hvd.size() == len(members), f"size {hvd.size()} for {members}")
    expect(hvd.rank() == members.index(me),
           f"rank {hvd.rank()}, want {members.index(me)} in {members}")
    # One host: the local ranks are the world's, one rank per local rank.
    expect(hvd.local_rank() == hvd.rank() and
           hvd.local_size() == len(members), "local rank/size")
    expect(hvd.cross_rank() == 0 and hvd.cross_size() == 1, "cross rank/size")
    got = hvd.allreduce(torch.from_numpy(inputs(me, case)), op=hvd.Sum,
                        name=f"sum{case}")
    want = sum(inputs(r, case) for r in members)
    expect(np.allclose(got.numpy(), want, atol=1e-12),
           f"allreduce over {members}")
    gathered = hvd.allgather(torch.tensor([[me, hvd.rank()]]),
                             name=f"gather{case}")
    expect(gathered.tolist() == [[r, i] for i, r in enumerate(members)],
           f"allgather {gathered.tolist()} over {members}")
    root = len(members) - 1
    value = hvd.broadcast(torch.tensor([float(me)]), root_rank=root,
                          name=f"bcast{case}")
    expect(value.item() == members[root], f"broadcast {value.item()}")


def shutdown_together():
    # A rank that shuts down stops its world's engine on every rank: wait
    # until every rank of the world is done.
    hvd.barrier()
    hvd.shutdown()


def test_a_bad_comm_raises(s):
    accepted = "None, a list of MPI_COMM_WORLD ranks or an mpi4py"
    expect_raises(TypeError, [accepted, "str"], hvd.init, comm="0,1")
    expect_raises(TypeError, [accepted, "float"], hvd.init, comm=3.5)
    expect_raises(TypeError, [accepted, "Group"], hvd.init,
                  comm=s.MPI.COMM_WORLD.Get_group())
    expect_raises(TypeError, ["holds ints"], hvd.init, comm=[0, "1"])
    expect_raises(ValueError, ["comm=[]", "empty"], hvd.init, comm=[])
    expect_raises(ValueError, ["COMM_NULL"], hvd.init, comm=s.MPI.COMM_NULL)
    expect(not hvd.is_initialized(), "a refused comm started terse")


def test_b_rank_lists_make_pairs(s):
    me = s.world_rank
    members = [0, 1] if me < 2 else [3, 2]  # {3, 2}: out of order.
    single = hvd.ProcessSet([1])  # Rank 1 of the pair: world 1 or 2.
    hvd.init(comm=members, process_sets=[single])
    check_world(s, members, case=1)
    expect(single.included() == (me == members[1]),
           f"set [1] of {members} on world rank {me}")
    if single.included():
        x = inputs(me, 2)
        got = hvd.allreduce(torch.from_numpy(x), op=hvd.Sum, name="single",
                            process_set=single)
        expect(np.allclose(got.numpy(), x), "a one-rank set's sum")
    # The same settings (an equal list, an equal set): no-op.
    hvd.init(comm=tuple(members), process_sets=[hvd.ProcessSet([1])])
    expect(hvd.size() == 2, "the repeated init changed the world")
    expect_raises(hvd.TerseError, ["other settings"], hvd.init,
                  comm=[0, 1, 2, 3], process_sets=[hvd.ProcessSet([1])])
    shutdown_together()


def test_c_mpi4py_communicator(s):
    me = s.world_rank
    split = s.MPI.COMM_WORLD.Split(color=me % 2, key=me)
    members = [me % 2, me % 2 + 2]
    hvd.init(comm=split)
    check_world(s, members, case=3)
    hvd.init(comm=split)  # Same communicator: no-op.
    expect_raises(hvd.TerseError, ["other settings"], hvd.init,
                  comm=s.MPI.COMM_WORLD)
    # Elastic's reset: shutdown and init again with the same communicator.
    basics.reinit()
    check_world(s, members, case=4)
    # terse runs on its own duplicate: the application may free its own.
    split.Free()
    check_world(s, members, case=5)
    shutdown_together()


def test_d_outsider_is_refused(s):
    me = s.world_rank
    if me == 3:
        expect_raises(hvd.TerseError,
                      ["rank 3 of MPI_COMM_WORLD", "not in the rank list",
                       "[0, 1, 2]"], hvd.init, comm=[0, 1, 2])
        expect(not hvd.is_initialized(), "the outsider started terse")
    else:
        hvd.init(comm=[0, 1, 2])
        check_world(s, [0, 1, 2], case=6)
        shutdown_together()
    # Bad lists fail on every process, before any message.
    expect_raises(hvd.TerseError, ["rank 4", "outside [0, 4)"], hvd.init,
                  comm=[0, 4])
    expect_raises(hvd.TerseError, ["rank 1 is listed twice", "[1, 1]"],
                  hvd.init, comm=[1, 1])


def test_e_communicator_process_sets_are_refused(s):
    split = s.MPI.COMM_WORLD.Split(color=s.world_rank % 2, key=s.world_rank)
    try:
        expect_raises(NotImplementedError, ["ProcessSet(communicator)",
                                            "list of ranks"],
                      hvd.init, comm=[0, 1, 2, 3],
                      process_sets=[hvd.ProcessSet(split)])
    finally:
        split.Free()
    expect(not hvd.is_initialized(), "refused sets started terse")


def test_f_comm_world_is_the_default(s):
    hvd.init(comm=s.MPI.COMM_WORLD)
    check_world(s, [0, 1, 2, 3], case=7)
    hvd.init()  # comm=None is the same world: no-op.
    shutdown_together()


def all_done(s):
    s.MPI.COMM_WORLD.Barrier()


if __name__ == "__main__":
    run(globals(), setup=Setup, teardown=all_done)
