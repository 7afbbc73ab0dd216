#!/bin/bash
# Session 18: the engine's allgather with and without the redundant size
# check (MpiCommunicator::Allgatherv's signature allgather; the engine's
# sizes come from its negotiated response). allreduce_bench binaries of
# 463628f (before) and of the change (after), built beforehand into
# /tmp/arb_old and /tmp/arb_new, alternated; 4 ranks on 2 cores, the flags
# of bench/run_allreduce_bench.sh.
cd "$(dirname "$0")/../../../.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_mpi_yield_when_idle=1
L() { echo "== $* $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"; }
for r in 1 2 3; do
  for b in arb_old arb_new; do
    L "$b run $r"
    mpirun -np 4 --bind-to none --map-by slot --oversubscribe \
      --mca btl self,vader,tcp --mca btl_tcp_if_include lo \
      --mca oob_tcp_if_include lo /tmp/$b --min_bytes=4096 \
      --max_bytes=4194304 --rounds=5 2>&1 | grep -E '^(size|[0-9]+[KM]iB)'
  done
done
L done
