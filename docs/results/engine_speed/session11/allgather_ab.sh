#!/bin/bash
# A/B of bench/allreduce_bench before (362bcbe, built in a worktree and
# copied to /tmp/ag_before) and after (the allgather response cache,
# /tmp/ag_after), alternated: allgather_ab.log.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
for round in 1 2 3; do
  for v in before after; do
    echo "=== $v round $round $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
    mpirun -np 4 --bind-to none --map-by slot --oversubscribe \
      --mca btl self,vader,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
      /tmp/ag_$v --max_bytes=4194304 --rounds=4
  done
done
