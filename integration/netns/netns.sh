#!/bin/bash
# A real slow network on one machine: N network namespaces ("hosts"), each
# joined by a veth pair to a bridge in one more namespace, with a tc tbf rate
# limit on both ends of every link. MPI runs across them over TCP without ssh
# (mpirun_netns.sh). Needs root. Only addresses inside these namespaces are
# used (10.77.0.0/24 on the bridge).
#
#   netns.sh up N RATE     e.g. netns.sh up 4 100mbit   (RATE "none": no limit)
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

address() { echo "$SUBNET.$(( $1 + 1 ))"; }

down() {
  local namespaces
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

case ${1:-} in
  up) up "${2:?number of hosts}" "${3:?rate, e.g. 100mbit or none}" ;;
  down) down ;;
  hosts) awk '{print $1}' "$STATE" ;;
  *) echo "usage: $0 up N RATE | down | hosts" >&2; exit 2 ;;
esac
