#!/bin/bash
# Session 18: one 1 MiB tensor per step through Python, terse against
# Horovod 0.28.1 and one raw MPI_Allreduce, 4 ranks on this machine's 2
# cores (shared memory), alternated round by round. Run from the repository
# root, nothing else running.
cd "$(dirname "$0")/../../../.."
L() { echo "== $* $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"; }
L "one1mib"
/usr/bin/python3 bench/py_allreduce_bench.py \
  --modes terse:none,horovod:none,mpi:per_tensor \
  --workloads one1mib --rounds 10 --steps 30 --warmup 5 2>&1 |
  grep -E '^one1mib |^workload|^\{'
L done
