#!/bin/bash
# Session 11's engine-speed runs (docs/results/engine_speed.md "Session 11"),
# in this order, on a machine with nothing else running (2026-12-04,
# 16:56-17:05 UTC). py_default and autotune_run1-3 on c013490 (the grouped
# ops, the negotiated alltoall refusal and init(comm=) merged);
# autotune_run4-5 and py_grouped on the same engine with the bench's new
# grouped modes.
set -euo pipefail
cd "$(dirname "$0")/../../../.."
/usr/bin/python3 bench/py_allreduce_bench.py --rounds 5 --steps 5 --warmup 1 > py_default.log
for i in 1 2 3; do bench/engine/run_autotune.sh > autotune_run$i.log; done
for i in 4 5; do bench/engine/run_autotune.sh --steps 10 > autotune_run$i.log; done
/usr/bin/python3 bench/py_allreduce_bench.py \
  --modes terse:none,horovod:none,terse:grouped,horovod:grouped \
  --rounds 5 --steps 5 --warmup 1 > py_grouped.log
/usr/bin/python3 bench/torch_step_bench.py --transport shm \
  --modes terse:none,horovod:none,terse:fp16,horovod:fp16 --rounds 5 > torch_step.log
