#!/bin/bash
# Session 18: could terse win back its per-op cost at 1 MiB by reducing
# faster than MPI_Allreduce's default? allreduce_bench at 1 MiB, 4 ranks on
# 2 cores (bench/run_allreduce_bench.sh's flags), under each of Open MPI's
# coll_tuned allreduce algorithms (0 = the default's decision, 1 basic
# linear, 2 nonoverlapping, 3 recursive doubling, 4 ring, 5 segmented
# ring, 6 Rabenseifner). The setting reaches both columns (terse's
# MpiCommunicator and the raw call); read the raw column (ar_raw).
cd "$(dirname "$0")/../../../.."
L() { echo "== $* $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"; }
for pass in 1 2; do
  for alg in 0 1 2 3 4 5 6; do
    L "pass $pass algorithm $alg"
    OMPI_MCA_coll_tuned_use_dynamic_rules=1 \
      OMPI_MCA_coll_tuned_allreduce_algorithm=$alg \
      bench/run_allreduce_bench.sh 4 --min_bytes=1048576 \
      --max_bytes=1048576 --rounds=10 2>/dev/null | grep -E '^(size|1MiB)'
  done
done
L done
