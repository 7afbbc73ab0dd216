#!/bin/bash
# Session 16: the data-centre network's uplinks in fq_codel's order
# (0e738d1), the pipelined ring (379b226), the staged fusion copies
# (7d68cb8) and four ring messages in flight (bb369e8). Binaries built
# beforehand into /tmp (bazel build in a worktree of each commit):
#   eb_2158392              session 15's main: the ring in lockstep, 4 MiB
#                           segments, fuse / allreduce / unfuse in turn
#   eb_379b226              the ring pipelined across steps, 512 KiB
#                           segments, two in flight
#   eb_bb369e8              and the copies staged inside the ring, four in
#                           flight
#   router_2158392          session 15's delay_router (every packet booked
#                           on its uplink FIFO as it is read)
# Run from the repository root of bb369e8 or later, as root, nothing else
# running.
cd "$(dirname "$0")/../../../.."
export TERSE_NETNS_PREFIX=terse-dc TERSE_NETNS_SUBNET=10.79.0
export TERSE_NETNS_STATE=/run/terse-dc-netns.hosts
L() { echo "== $* $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"; }
run() { integration/netns/mpirun_netns.sh --mca mpi_yield_when_idle 1 "$@"; }
rows() { grep -E '^(small|resnet50) +(\((a|b|c)\) |SPEED)'; }
eb() { run -- /tmp/$1 --workloads small,resnet50 --rounds 3 --steps 2 2>&1 | rows; }

# The network as session 15 had it (its router), then this session's.
bazel build //integration/netns:delay_router >/dev/null 2>&1
cp -f bazel-bin/integration/netns/delay_router /tmp/router_new
for net in 2158392 new; do
  integration/netns/netns.sh down >/dev/null 2>&1
  TERSE_DELAY_ROUTER=/tmp/router_$net integration/netns/netns.sh datacentre 4 \
    >/dev/null
  L "router $net: link_probe"
  python3 integration/netns/link_probe.py
  python3 integration/netns/link_probe.py | tail -1
  bins="eb_2158392 eb_379b226 eb_bb369e8"
  [ "$net" = 2158392 ] && bins="eb_2158392 eb_bb369e8"
  for r in 1 2; do
    for b in $bins; do
      L "router $net: engine_bench $b run $r"
      eb $b
    done
  done
done
L "done"
