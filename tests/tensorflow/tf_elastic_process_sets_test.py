"""terse.tensorflow.elastic with static process sets, under mpirun (2 and 4
ranks): an error that stops the engine (a stall past
TERSE_STALL_SHUTDOWN_SECONDS) makes every rank re-initialise terse
(Horovod's shutdown(); init()); the static sets come back under the same
ids, the ProcessSet objects the script holds work again, and training
resumes from the last commit.

Oracle: numpy sums of every member's inputs over all the steps, as if no
failure had happened.
"""

import os

import numpy as np
import tensorflow as tf

import terse.tensorflow as hvd
from terse import basics
from mpi_testlib import expect, run

STEPS = 5


def value(rank, step):
    return np.random.default_rng(100 * step + rank).standard_normal(3)


class Sets:
    def __init__(self):
        size = int(os.environ["OMPI_COMM_WORLD_SIZE"])
        rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
        self.even = hvd.ProcessSet(list(range(0, size, 2)))
        self.odd = hvd.ProcessSet(list(range(1, size, 2)))
        hvd.init(process_sets=[self.even, self.odd],
                 config={"TERSE_STALL_CHECK_SECONDS": "0.5",
                         "TERSE_STALL_SHUTDOWN_SECONDS": "2"})
        self.mine = self.even if rank % 2 == 0 else self.odd


def test_stopped_engine_reinits_with_static_sets(s):
    rank = hvd.rank()
    ids = (s.even.process_set_id, s.odd.process_set_id)
    state = hvd.elastic.ObjectState(step=0, acc=np.zeros((2, 3)))
    failed, reinits = [], []
    real_reinit = basics.reinit

    def counting_reinit():
        reinits.append(basics.engine_error())
        real_reinit()

    basics.reinit = counting_reinit

    @hvd.elastic.run
    def train(st):
        while st.step < STEPS:
            if st.step == 2 and not failed:
                failed.append(st.step)
                # Rank 0 and the others wait on different tensors: a stall,
                # which stops every rank's engine after 2 s.
                hvd.allreduce(tf.ones([1]), op=hvd.Sum,
                              name="skew.0" if rank == 0 else "skew.rest")
            set_sum = hvd.allreduce(tf.constant(value(rank, st.step)),
                                    name="set.sum", op=hvd.Sum,
                                    process_set=s.mine).numpy()
            # The state is the same on every rank (sync copies rank 0's).
            rows = np.zeros((2, 3))
            if rank == s.mine.ranks[0]:
                rows[rank % 2] = set_sum
            st.acc = st.acc + hvd.allreduce(tf.constant(rows), name="rows",
                                            op=hvd.Sum).numpy()
            st.step += 1
            st.commit()

    try:
        train(state)
    finally:
        basics.reinit = real_reinit
    expect(failed == [2], f"one failure: {failed}")
    # At least the injected stall's re-init (a loaded machine may add a
    # spurious one; the sums below must hold either way).
    expect(len(reinits) >= 1 and all(r is not None and "stall" in r.lower()
                                     for r in reinits),
           f"a re-init after the engine stopped: {reinits}")
    expect((s.even.process_set_id, s.odd.process_set_id) == ids,
           f"static sets registered again under ids {ids}")
    for row, ps in enumerate((s.even, s.odd)):
        want = sum(value(r, step) for step in range(STEPS) for r in ps.ranks)
        expect(np.allclose(state.acc[row], want, atol=1e-12),
               f"set {ps.ranks} sums {state.acc[row]} vs {want}")
    hvd.barrier()


if __name__ == "__main__":
    run(globals(), setup=Sets)
