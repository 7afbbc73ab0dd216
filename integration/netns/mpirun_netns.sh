#!/bin/bash
# mpirun across the namespaces made by `netns.sh up N RATE`: one rank per
# namespace, MPI over TCP on the bridge subnet, mpirun itself started inside
# the first namespace.
#   mpirun_netns.sh [extra mpirun args] -- COMMAND...
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
extra=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do extra+=("$1"); shift; done
shift || true
hostfile=$(mktemp)
awk '{print $1 " slots=1"}' /run/terse-netns.hosts >"$hostfile"
n=$(wc -l </run/terse-netns.hosts)
first_ns=$(awk 'NR==1 {print $2}' /run/terse-netns.hosts)
env_args=()
for v in $(env | grep -oE '^(TERSE_[A-Z_0-9]+|PYTHONPATH|OMP_NUM_THREADS|MASTER_ADDR|MASTER_PORT|GLOO_SOCKET_IFNAME)=' | tr -d =); do
  env_args+=(-x "$v")
done
exec ip netns exec "$first_ns" unshare --uts sh -c "hostname $first_ns; exec \"\$@\"" sh \
  mpirun --allow-run-as-root -np "$n" --hostfile "$hostfile" \
  --mca plm_rsh_agent "$here/rsh_agent.sh" \
  --mca btl self,tcp --mca btl_tcp_if_include 10.77.0.0/24 \
  --mca oob_tcp_if_include 10.77.0.0/24 --bind-to none \
  "${env_args[@]}" "${extra[@]}" "$@"
