"""ProcessSet(mpi4py communicator), Horovod's other form, under mpirun (2
and 4 ranks): each process passes the communicator it is in to init(), and
every process's sets are registered. References: the ranks each
communicator must hold (computed from the split colours) and numpy sums of
the members' inputs.
"""

import sys

import numpy as np
import torch

import terse.torch as hvd
from mpi_testlib import expect, expect_raises, run


class FakeComm:
    """Looks like an mpi4py object to ProcessSet, without mpi4py."""


FakeComm.__module__ = "mpi4py.MPI"


def missing_mpi4py_is_named():
    # Before mpi4py is imported: hide it, as in a Python without it.
    saved = sys.modules.get("mpi4py")
    sys.modules["mpi4py"] = None
    try:
        err = expect_raises(NotImplementedError,
                            ["needs mpi4py", "cannot import"],
                            hvd.ProcessSet, FakeComm())
        expect(isinstance(err, hvd.TerseError) and
               type(err).__name__ == "ProcessSetsNotSupportedError",
               f"a ProcessSetsNotSupportedError, not {type(err)}")
    finally:
        if saved is None:
            del sys.modules["mpi4py"]
        else:
            sys.modules["mpi4py"] = saved


class Setup:
    def __init__(self):
        missing_mpi4py_is_named()
        from mpi4py import MPI
        self.MPI = MPI
        world = MPI.COMM_WORLD
        rank, size = world.Get_rank(), world.Get_size()
        self.parity = world.Split(color=rank % 2, key=rank)
        self.parity_set = hvd.ProcessSet(self.parity)
        self.world_set = hvd.ProcessSet(world)
        sets = [self.parity_set, self.world_set]
        if size == 4:
            # {0,1} as a rank list, and halves {0,1} / {2,3} by
            # communicator: ranks 0 and 1 alias the listed {0,1}.
            self.pair = hvd.ProcessSet([0, 1])
            self.halves = hvd.ProcessSet(world.Split(color=rank // 2,
                                                     key=rank))
            sets = [self.pair, self.parity_set, self.halves, self.world_set]
        hvd.init(process_sets=sets,
                 config={"TERSE_DYNAMIC_PROCESS_SETS": "1"})


def test_ranks_and_ids(s):
    rank, size = hvd.rank(), hvd.size()
    mine = list(range(rank % 2, size, 2))
    expect(s.parity_set.ranks == mine, f"parity ranks {s.parity_set.ranks}")
    expect(s.parity_set.mpi_comm is s.parity, "mpi_comm kept")
    expect(s.world_set.process_set_id == 0, "COMM_WORLD is the global set")
    # Every process's sets exist, members or not.
    ids = {tuple(ps.ranks): ps.process_set_id for ps in
           [hvd.global_process_set, s.parity_set]}
    if size == 2:
        # {0} and {1}: process 0's set first.
        expect(s.parity_set.process_set_id == 1 + rank % 2,
               f"id {s.parity_set.process_set_id}")
    else:
        # [0,1] (id 1), then parity {0,2} (2) and {1,3} (3), then halves:
        # {0,1} is the listed pair, {2,3} new (4).
        expect(s.pair.process_set_id == 1, f"pair id {s.pair.process_set_id}")
        expect(s.parity_set.process_set_id == 2 + rank % 2,
               f"parity id {s.parity_set.process_set_id}")
        want_halves = 1 if rank < 2 else 4
        expect(s.halves.process_set_id == want_halves,
               f"halves id {s.halves.process_set_id}")
        expect(s.halves.ranks == ([0, 1] if rank < 2 else [2, 3]),
               f"halves ranks {s.halves.ranks}")
    expect(len(ids) == 2, "ids")


def test_ops_on_comm_sets(s):
    rank = hvd.rank()
    sets = [s.parity_set] + ([s.halves] if hvd.size() == 4 else [])
    for case, ps in enumerate(sets):
        x = np.random.default_rng(10 * case + rank).standard_normal(7)
        got = hvd.allreduce(torch.from_numpy(x), name=f"c{case}", op=hvd.Sum,
                            process_set=ps)
        want = sum(np.random.default_rng(10 * case + r).standard_normal(7)
                   for r in ps.ranks)
        expect(np.allclose(got.numpy(), want, atol=1e-12),
               f"sum over {ps.ranks}")
        expect(ps.rank() == ps.ranks.index(rank) and ps.size() ==
               len(ps.ranks), "rank()/size() in the set")


def test_comm_sets_are_not_added_dynamically(s):
    expect_raises(NotImplementedError, ["MPI communicator", "world ranks"],
                  hvd.add_process_set, hvd.ProcessSet(s.parity))
    expect_raises(ValueError, ["list of process ranks or an mpi4py Comm"],
                  hvd.ProcessSet, 3.5)
    expect_raises(ValueError, ["COMM_NULL"], hvd.ProcessSet,
                  s.MPI.COMM_NULL)


def all_done(_):
    # A rank that shuts down stops every rank's engine: wait for all.
    hvd.barrier()


if __name__ == "__main__":
    run(globals(), setup=Setup, teardown=all_done)
