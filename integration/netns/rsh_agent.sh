#!/bin/bash
# Open MPI's plm_rsh_agent for the namespaces of netns.sh: called like ssh as
# `rsh_agent.sh [ssh options] HOST COMMAND...`, it runs COMMAND inside the
# namespace that owns HOST's address, with its own UTS hostname (Open MPI
# tells hosts apart by hostname).
set -eu
while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done  # Drop ssh options.
host=$1; shift
ns=$(awk -v h="$host" '$1 == h {print $2}' "${TERSE_NETNS_STATE:-/run/terse-netns.hosts}")
[ -n "$ns" ] || { echo "rsh_agent: unknown host $host" >&2; exit 1; }
exec ip netns exec "$ns" unshare --uts sh -c "hostname $ns; $*"
