#!/bin/bash
# Session 17: fp16 cast buckets staged inside the ring (14a5a03) against the
# commit before (886eca6, cast all / allreduce / widen all), on the
# data-centre network (netns.sh datacentre 4, already up), py_allreduce_bench
# alternated twice; Horovod's fp16 in the same runs. Run from the
# repository root of 14a5a03 or later with a worktree of 886eca6 at
# /work/wt-old (both with //bindings/python:_terse.so built), as root,
# nothing else running.
cd "$(dirname "$0")/../../../.."
export TERSE_NETNS_PREFIX=terse-dc TERSE_NETNS_SUBNET=10.79.0
export TERSE_NETNS_STATE=/run/terse-dc-netns.hosts
L() { echo "== $* $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"; }
py() {
  /usr/bin/python3 "$1/bench/py_allreduce_bench.py" --transport netns \
    --modes "$2" --workloads small,resnet50 --rounds 3 --steps 4 --warmup 1 \
    2>&1 | grep -E '^(small|resnet50) '
}
for r in 1 2; do
  L "886eca6 run $r"; py /work/wt-old terse:fp16
  L "14a5a03 run $r"; py . terse:fp16,horovod:fp16
done
L done
