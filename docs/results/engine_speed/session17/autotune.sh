#!/bin/bash
# Session 17: autotune_bench with the confirm phase (the sweep's best
# setting and a fresh autotune run re-timed side by side, five rounds),
# five runs, 4 ranks on shared memory. Run from the repository root, as
# root, nothing else running. Writes autotune_run{1..5}.log here.
cd "$(dirname "$0")/../../../.."
out=docs/results/engine_speed/session17
bazel build //bench/engine:autotune_bench >/dev/null 2>&1
for r in 1 2 3 4 5; do
  {
    echo "== autotune run $r $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
    bench/engine/run_autotune.sh --confirm_rounds 5 2>/dev/null
  } > "$out/autotune_run$r.log"
done
