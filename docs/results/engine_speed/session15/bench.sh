#!/bin/bash
# Session 15: terse's ring allreduce across hosts (32e611a) and solo_bytes
# auto (4be2c5c), on the data-centre network of integration/netns/
# (`netns.sh datacentre 4`, started beforehand with the variables below).
# engine_bench alternates three binaries, built beforehand into /tmp
# (bazel build //bench/engine:engine_bench in a worktree of each commit):
#   eb_1fea084  before: MPI_Allreduce always, tensors >= 1 MiB alone
#   eb_32e611a  the ring for buffers >= 2 MiB across hosts
#   eb_4be2c5c  and no solo tensors across hosts (fused up to the threshold)
# Then the same binary with Open MPI's own ring forced (MCA parameters: the
# experiment that pointed at the algorithm), and allreduce_bench with the
# ring forced or off at 1-16 MiB (where kAuto's 2 MiB comes from).
cd "$(dirname "$0")/../../../.."
export TERSE_NETNS_PREFIX=terse-dc TERSE_NETNS_SUBNET=10.79.0
export TERSE_NETNS_STATE=/run/terse-dc-netns.hosts
L() { echo "== $* $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"; }
run() { integration/netns/mpirun_netns.sh --mca mpi_yield_when_idle 1 "$@"; }
rows() { grep -E '^(small|resnet50) +\((a|b|c)\) '; }
for r in 1 2; do
  for b in eb_1fea084 eb_32e611a eb_4be2c5c; do
    L "engine_bench netns $b run $r"
    run -- /tmp/$b --workloads small,resnet50 --rounds 3 --steps 2 2>&1 | rows
  done
done
L "engine_bench netns eb_1fea084, Open MPI's ring forced (coll_tuned_allreduce_algorithm 4)"
run --mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm 4 \
  -- /tmp/eb_1fea084 --workloads small,resnet50 --rounds 3 --steps 2 2>&1 | rows
bazel build //bench:allreduce_bench >/dev/null 2>&1
for m in ring mpi; do
  L "allreduce_bench netns TERSE_MPI_ALLREDUCE=$m"
  for sizes in "--min_bytes=1048576 --max_bytes=16777216" \
               "--min_bytes=2097152 --max_bytes=2097152"; do
    TERSE_MPI_ALLREDUCE=$m run -- bazel-bin/bench/allreduce_bench $sizes \
      --budget_bytes=33554432 --rounds=2 2>&1 | grep -E '^[0-9]+MiB|^\{'
  done
done
L "done"
