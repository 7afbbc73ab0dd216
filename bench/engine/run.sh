#!/bin/bash
# Builds and runs engine_bench under mpirun -np 4 on this machine (about a
# minute or two). Extra arguments go to engine_bench, e.g. --steps 4.
#   bench/engine/run.sh [ARGS...]
# TRANSPORT=shm (default: shared memory between the ranks, what one machine
# uses), TRANSPORT=tcp (TCP over loopback only, as ranks on different
# machines talk: every message pays a network stack's latency) or
# TRANSPORT=netns (one rank per network namespace of integration/netns,
# e.g. after `integration/netns/netns.sh datacentre 4`: a network with
# per-message latency; the namespaces' count sets the ranks).
set -euo pipefail
cd "$(dirname "$0")/../.."
bazel build //bench/engine:engine_bench
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
case "${TRANSPORT:-shm}" in
  shm) btl=self,vader,tcp ;;
  tcp) btl=self,tcp ;;
  netns)
    # Each namespace is a host of one slot, so Open MPI does not know the
    # ranks share this machine's cores: ask for yielding explicitly.
    yield=()
    hosts=$(wc -l <"${TERSE_NETNS_STATE:-/run/terse-netns.hosts}")
    if (( hosts > $(nproc) )); then yield=(--mca mpi_yield_when_idle 1); fi
    exec integration/netns/mpirun_netns.sh "${yield[@]}" -- \
      bazel-bin/bench/engine/engine_bench \
      --shapes bench/engine/resnet50_param_shapes.tsv "$@" ;;
  *) echo "run.sh: TRANSPORT=${TRANSPORT} is not shm, tcp or netns" >&2
     exit 2 ;;
esac
np=${NP:-4}
# More ranks than cores (4 on 2 here): waiting ranks yield their core, as
# under tools/terserun's recommended settings.
if (( np > $(nproc) )); then export OMPI_MCA_mpi_yield_when_idle=1; fi
exec mpirun -np "$np" --oversubscribe --bind-to none \
  --mca btl "$btl" --mca btl_tcp_if_include lo \
  --mca oob_tcp_if_include lo \
  bazel-bin/bench/engine/engine_bench \
  --shapes bench/engine/resnet50_param_shapes.tsv "$@"
