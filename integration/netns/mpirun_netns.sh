#!/bin/bash
# mpirun across the namespaces made by `netns.sh up N RATE`: one rank per
# namespace, MPI over TCP on the bridge subnet, mpirun itself started inside
# the first namespace.
#   mpirun_netns.sh [extra mpirun args] -- COMMAND...
# TERSE_NETNS_STATE / TERSE_NETNS_SUBNET pick another set of namespaces
# (netns.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
state=${TERSE_NETNS_STATE:-/run/terse-netns.hosts}
subnet=${TERSE_NETNS_SUBNET:-10.77.0}.0/24
export TERSE_NETNS_STATE=$state  # rsh_agent.sh runs in mpirun's environment.
extra=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do extra+=("$1"); shift; done
shift || true
hostfile=$(mktemp)
awk '{print $1 " slots=1"}' "$state" >"$hostfile"
n=$(wc -l <"$state")
first_ns=$(awk 'NR==1 {print $2}' "$state")
env_args=()
for v in $(env | grep -oE '^(TERSE_[A-Z_0-9]+|PYTHONPATH|OMP_NUM_THREADS|MASTER_ADDR|MASTER_PORT|GLOO_SOCKET_IFNAME)=' | tr -d =); do
  env_args+=(-x "$v")
done
exec ip netns exec "$first_ns" unshare --uts sh -c "hostname $first_ns; exec \"\$@\"" sh \
  mpirun --allow-run-as-root -np "$n" --hostfile "$hostfile" \
  --mca plm_rsh_agent "$here/rsh_agent.sh" \
  --mca btl self,tcp --mca btl_tcp_if_include "$subnet" \
  --mca oob_tcp_if_include "$subnet" --bind-to none \
  "${env_args[@]}" "${extra[@]}" "$@"
