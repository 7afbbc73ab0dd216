#!/bin/bash
# Runs every benchmark of docs/results/engine_speed.md once, in sequence, and
# keeps each program's output under OUT (default /tmp/engine_speed.<time>).
# About 20 minutes on 2 cores (step counts are cut to fit). Needs Horovod's
# environment (bench/peers/horovod.sh) and root for the namespace network;
# not part of CI.
#   bench/run_engine_speed.sh [OUT]
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-/tmp/engine_speed.$(date -u +%Y%m%dT%H%M%S)}
mkdir -p "$out"
py=/usr/bin/python3
# The data-centre namespaces live beside any other set (netns.sh).
export TERSE_NETNS_PREFIX=terse-dc TERSE_NETNS_SUBNET=10.79.0
export TERSE_NETNS_STATE=/run/terse-dc-netns.hosts
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

step() {  # step NAME COMMAND...: runs COMMAND, output to $out/NAME.log
  local name=$1; shift
  echo "== $(date -u +%H:%M:%S) $name: $*  [$(cut -d' ' -f1-3 /proc/loadavg)]" \
    | tee -a "$out/commands.txt"
  "$@" >"$out/$name.log" 2>&1
  echo "   exit $?, $(date -u +%H:%M:%S) [$(cut -d' ' -f1-3 /proc/loadavg)]" \
    | tee -a "$out/commands.txt"
}

bazel build //bench/engine:engine_bench //bench:allreduce_bench \
  //bindings/python:_terse.so //integration/netns:delay_router >/dev/null 2>&1
bench/peers/horovod.sh --check || exit 1
uptime | tee "$out/uptime_before.txt"
step engine_shm bench/engine/run.sh
step py_allreduce_shm $py bench/py_allreduce_bench.py --rounds 3 --steps 5 \
  --warmup 1
step py_one1mib_shm $py bench/py_allreduce_bench.py \
  --modes terse:none,horovod:none,mpi:per_tensor --workloads one1mib \
  --rounds 10 --steps 30 --warmup 5
step torch_step_shm $py bench/torch_step_bench.py --transport shm \
  --modes terse:none,horovod:none,terse:fp16,horovod:fp16 --rounds 3 \
  --steps 80 --warmup 10
step allreduce_1mib bench/run_allreduce_bench.sh 4 --min_bytes=1048576 \
  --max_bytes=67108864 --budget_bytes=134217728 --rounds=2
integration/netns/netns.sh datacentre 4 >"$out/netns_up.log" 2>&1 || exit 1
step link_probe $py integration/netns/link_probe.py
step engine_netns env TRANSPORT=netns bench/engine/run.sh --rounds 2
step py_allreduce_netns $py bench/py_allreduce_bench.py --transport netns \
  --modes terse:none,horovod:none,mpi:per_tensor,mpi:flat --workloads small \
  --rounds 3 --steps 4 --warmup 1
integration/netns/netns.sh down
# Where the time goes: one rank's Python-side cost per tensor, and the
# engine's phases (TERSE_TIMELINE) for the small tensors, none and fp16.
pypath=bindings/python:bazel-bin/bindings/python
step profile_terse env PYTHONPATH=$pypath mpirun -np 1 --bind-to none \
  $py bench/py_enqueue_profile.py terse
step profile_horovod mpirun -np 1 --bind-to none \
  /opt/terse-horovod-venv/bin/python bench/py_enqueue_profile.py horovod
for mode in none fp16; do
  rm -f "$out/timeline_$mode.json"
  step "timeline_run_$mode" env PYTHONPATH=$pypath \
    TERSE_TIMELINE="$out/timeline_$mode.json" OMPI_MCA_mpi_yield_when_idle=1 \
    mpirun -np 4 --oversubscribe --bind-to none --mca btl self,vader,tcp \
    --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
    $py bench/py_allreduce_bench.py --worker "terse:$mode" --workloads small \
    --warmup 0 --steps 4
  step "timeline_$mode" $py bench/timeline_breakdown.py \
    "$out/timeline_$mode.json" --steps 4
done
cp "${TERSE_NETNS_STATE}.router.log" "$out/router.log" 2>/dev/null
uptime | tee "$out/uptime_after.txt"
echo "logs in $out"
