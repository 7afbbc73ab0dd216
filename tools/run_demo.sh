#!/bin/bash
# The main job (README): set-up, build, then a 4-rank data-parallel training
# run of a small CNN on Fashion-MNIST with terse's adaptive compression
# (GraVAC over its default portfolio, on the library's defaults).
#
# On a fast link compression does not pay and every bucket stays dense, so
# when it can (as root, with `ip netns` working) the demo runs its 4 ranks in
# 4 network namespaces joined by a bridge, each link limited to RATE with
# tc tbf (integration/netns/), where the controller has something to gain.
# Otherwise it says why and runs on loopback. Per epoch rank 0 prints, per
# bucket, what it sent (compressor and level, share of steps), bytes against
# dense, and why (the policy's line: gains and measured throughputs T_c).
#
#   tools/run_demo.sh [--rate RATE] [training args, e.g. --epochs 1]
#   TERSE_DEMO_RATE=200mbit tools/run_demo.sh
# RATE: a tc rate (default 100mbit), or "none" for loopback.
set -euo pipefail
cd "$(dirname "$0")/.."

rate=${TERSE_DEMO_RATE:-100mbit}
args=()
while [ $# -gt 0 ]; do
  case $1 in
    --rate) rate=${2:?--rate needs a value, e.g. 100mbit or none}; shift 2 ;;
    --rate=*) rate=${1#--rate=}; shift ;;
    *) args+=("$1"); shift ;;
  esac
done

tools/setup.sh
bazel build //tools:terse_info //bindings/python:_terse.so
bazel-bin/tools/terse_info | head -5
export TERSE_COMPRESSION=${TERSE_COMPRESSION:-gravac}
export PYTHONPATH="$PWD/bindings/python${PYTHONPATH:+:$PYTHONPATH}"
train=(/usr/bin/python3 integration/torch_fashion_mnist.py "${args[@]}")

# The demo's own namespaces, apart from the experiment's (netns.sh).
export TERSE_NETNS_PREFIX=terse-demo
export TERSE_NETNS_SUBNET=10.78.0
export TERSE_NETNS_STATE=/run/terse-demo-netns.hosts
netns=integration/netns/netns.sh

why_not=""
if [ "$rate" = none ]; then
  why_not="rate 'none' asked for"
elif [ "$(id -u)" -ne 0 ]; then
  why_not="not root (network namespaces need root)"
elif ! command -v tc >/dev/null || ! ip netns list >/dev/null 2>&1; then
  why_not="'ip netns' or 'tc' does not work here"
elif ! ip netns add terse-demo-probe 2>/dev/null; then
  why_not="cannot create a network namespace (a container without CAP_SYS_ADMIN?)"
else
  ip netns delete terse-demo-probe
fi

if [ -n "$why_not" ]; then
  echo "demo: running 4 ranks on loopback: $why_not. On loopback the link is" \
       "fast, so GraVAC rightly keeps every bucket dense (none). As root, a rate" \
       "(tools/run_demo.sh --rate 100mbit) shows it compress on a slow link." >&2
  exec tools/terserun -np 4 "${train[@]}"
fi

cleanup() { "$netns" down || true; }
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
"$netns" up 4 "$rate"
echo "demo: 4 ranks in 4 network namespaces, $rate per link (tc tbf on both" \
     "ends), MPI over TCP; TERSE_DEMO_RATE or --rate changes it, --rate none" \
     "runs on loopback." >&2
# Ranks waiting in MPI yield the core (4 ranks share the machine's cores);
# the ring allreduce is the bandwidth-optimal one on a slow link.
export OMPI_MCA_mpi_yield_when_idle=1
export OMPI_MCA_coll_tuned_use_dynamic_rules=1
export OMPI_MCA_coll_tuned_allreduce_algorithm=4
export OMP_NUM_THREADS=1
integration/netns/mpirun_netns.sh -- "${train[@]}"
