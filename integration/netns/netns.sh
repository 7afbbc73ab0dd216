#!/bin/bash
# A real slow network on one machine: N network namespaces ("hosts"), each
# joined by a veth pair to a bridge in one more namespace, with a tc tbf rate
# limit on both ends of every link. MPI runs across them over TCP without ssh
# (mpirun_netns.sh). Needs root. Only addresses inside these namespaces are
# used (10.77.0.0/24 on the bridge).
#
#   netns.sh up N RATE     e.g. netns.sh up 4 100mbit   (RATE "none": no limit)
#   netns.sh datacentre N  a data-centre network with per-message latency:
#                          every packet crosses the sender's link and the
#                          receiver's link, each $DC_DELAY_US us and
#                          $DC_RATE_MBIT Mbit/s (defaults below: 50 us one
#                          way, 100 us round trip), through delay_router
#                          (see below)
#   netns.sh down          removes every namespace this script made
#   netns.sh hosts         prints the host addresses, one a line
#
# Another set of namespaces can live beside the experiment's (the README demo
# uses one): TERSE_NETNS_PREFIX (namespace names, default terse-ns),
# TERSE_NETNS_SUBNET (the /24's first three octets, default 10.77.0) and
# TERSE_NETNS_STATE (the host list, default /run/terse-netns.hosts); the same
# variables select the set in mpirun_netns.sh and rsh_agent.sh.
set -euo pipefail

PREFIX=${TERSE_NETNS_PREFIX:-terse-ns}
BRIDGE_NS=${PREFIX}-br
SUBNET=${TERSE_NETNS_SUBNET:-10.77.0}
STATE=${TERSE_NETNS_STATE:-/run/terse-netns.hosts}
# The data-centre setting: a one-way host-to-host latency of 2 x DC_DELAY_US
# (two links), of the order of a switch hop plus the kernel stacks of two
# machines (tens of microseconds), and a rate the 2 cores of this machine can
# drive with 4 ranks (measured: docs/results/engine_speed.md), so that the
# link, not the CPU, bounds large messages. This kernel has no tc netem (nor
# fq), so no qdisc can delay a packet: `datacentre` joins the namespaces
# through TUN devices and one user-space router instead of veth pairs and a
# bridge (delay_router.cc: a star network, store and forward, its model
# tested in star_network_test.cc; each host's uplink sends in fq_codel's
# order, flow_queue.h, standing in for the qdisc this kernel lacks, so a
# link carries line rate both ways at once). MTU 65000 on the TUN devices stands for
# TSO/GRO (the stacks move 64 KiB segments; the rate still counts bytes).
# The router runs under SCHED_FIFO DC_RT_PRIORITY (0: not real-time) so that
# busy ranks on the same cores delay it less; its pid is in $STATE.router.pid.
DC_RATE_MBIT=${TERSE_NETNS_DC_RATE_MBIT:-1000}
DC_DELAY_US=${TERSE_NETNS_DC_DELAY_US:-25}
DC_RT_PRIORITY=${TERSE_NETNS_DC_RT_PRIORITY:-10}
DC_MTU=65000
ROUTER_PID=$STATE.router.pid
HERE=$(cd "$(dirname "$0")" && pwd)

address() { echo "$SUBNET.$(( $1 + 1 ))"; }

down() {
  local namespaces
  if [ -f "$ROUTER_PID" ]; then
    local router
    router=$(cat "$ROUTER_PID")
    kill -s TERM "$router" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$router" 2>/dev/null || break; sleep 0.1; done
    rm -f "$ROUTER_PID"
  fi
  namespaces=$(ip netns list | awk '{print $1}' | grep "^${PREFIX}" || true)
  # Processes a failed run left inside these namespaces (only ours live
  # there) would keep them alive after `ip netns delete`.
  for sig in TERM KILL; do
    local pids=""
    for ns in $namespaces; do pids="$pids $(ip netns pids "$ns" 2>/dev/null || true)"; done
    pids=$(echo $pids)
    [ -n "$pids" ] || break
    kill -s "$sig" $pids 2>/dev/null || true
    sleep 2
  done
  for ns in $namespaces; do
    ip netns delete "$ns" 2>/dev/null || true
  done
  rm -f "$STATE"
}

up() {
  local n=$1 rate=$2
  down
  ip netns add "$BRIDGE_NS"
  ip -n "$BRIDGE_NS" link set lo up
  ip -n "$BRIDGE_NS" link add br0 type bridge
  ip -n "$BRIDGE_NS" link set br0 up
  : >"$STATE"
  for ((i = 0; i < n; i++)); do
    local ns=${PREFIX}$i
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    # Create the pair inside the host namespace, the peer inside the bridge's.
    ip -n "$ns" link add eth0 type veth peer name p$i netns "$BRIDGE_NS"
    ip -n "$ns" addr add "$(address "$i")/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$BRIDGE_NS" link set p$i master br0
    ip -n "$BRIDGE_NS" link set p$i up
    if [ "$rate" != none ]; then
      ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" \
        burst 256kb latency 50ms
      ip netns exec "$BRIDGE_NS" tc qdisc add dev p$i root tbf rate "$rate" \
        burst 256kb latency 50ms
    fi
    echo "$(address "$i") $ns" >>"$STATE"
  done
}

# datacentre N: N namespaces joined by delay_router (no bridge namespace).
datacentre() {
  local n=$1 router=${TERSE_DELAY_ROUTER:-}
  if [ -z "$router" ]; then
    router="$HERE/../../bazel-bin/integration/netns/delay_router"
    (cd "$HERE" && bazel build //integration/netns:delay_router >&2)
  fi
  down
  local names=()
  for ((i = 0; i < n; i++)); do
    ip netns add "${PREFIX}$i"
    ip -n "${PREFIX}$i" link set lo up
    names+=("${PREFIX}$i")
  done
  local log=$STATE.router.log
  rm -f "$log"  # The router truncates it only once started: no stale "ready".
  local rt=()
  (( DC_RT_PRIORITY > 0 )) && rt=(--rt_priority "$DC_RT_PRIORITY")
  "$router" --netns "$(IFS=,; echo "${names[*]}")" --subnet "$SUBNET" \
    --link_delay_us "$DC_DELAY_US" --rate_mbit "$DC_RATE_MBIT" "${rt[@]}" \
    >"$log" 2>&1 </dev/null &
  echo $! >"$ROUTER_PID"
  for _ in $(seq 100); do
    grep -q '^ready' "$log" 2>/dev/null && break
    kill -0 "$(cat "$ROUTER_PID")" 2>/dev/null || break
    sleep 0.1
  done
  grep -q '^ready' "$log" || { cat "$log" >&2; down; exit 1; }
  : >"$STATE"
  for ((i = 0; i < n; i++)); do
    ip -n "${PREFIX}$i" addr add "$(address "$i")/24" dev tdr0
    ip -n "${PREFIX}$i" link set tdr0 mtu "$DC_MTU" up
    echo "$(address "$i") ${PREFIX}$i" >>"$STATE"
  done
}

case ${1:-} in
  up) up "${2:?number of hosts}" "${3:?rate, e.g. 100mbit or none}" ;;
  datacentre) datacentre "${2:?number of hosts}" ;;
  down) down ;;
  hosts) awk '{print $1}' "$STATE" ;;
  *) echo "usage: $0 up N RATE | datacentre N | down | hosts" >&2; exit 2 ;;
esac
