#!/bin/bash
# Session 17: the Python bench on the data-centre network at the session's
# final engine, session 16's flags, and the cycle-time experiment (one bucket
# at TERSE_CYCLE_TIME_MS=20 against two at the default 1 ms). Run from the
# repository root, as root, nothing else running, netns.sh datacentre 4 up.
cd "$(dirname "$0")/../../../.."
export TERSE_NETNS_PREFIX=terse-dc TERSE_NETNS_SUBNET=10.79.0
export TERSE_NETNS_STATE=/run/terse-dc-netns.hosts
L() { echo "== $* $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"; }
L "all modes"
/usr/bin/python3 bench/py_allreduce_bench.py --transport netns \
  --modes terse:none,horovod:none,mpi:per_tensor,mpi:flat \
  --workloads small,resnet50 --rounds 3 --steps 4 --warmup 1 2>&1 |
  grep -E '^(small|resnet50) |^workload'
L done
