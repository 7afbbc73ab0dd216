#!/bin/bash
# Session 10, quiet machine: issue 19's programs after the pipelined bucket.
cd /work/main
L() { echo "== $* $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"; }
for r in 1 2; do
  for c in 0 4194304; do
    L "engine_bench TERSE_PIPELINE_CHUNK=$c run $r"
    TERSE_PIPELINE_CHUNK=$c bench/engine/run.sh --workloads small,resnet50 --rounds 5 --steps 3 2>&1 | grep -v "^INFO\|^Loading\|^Analyzing\|^Target\|^  bazel"
  done
done
L "py_allreduce_bench run 2"
/usr/bin/python3 bench/py_allreduce_bench.py --modes terse:none,terse:unpipelined,horovod:none,terse:autotune --rounds 5 --steps 5 --warmup 1
L "torch_step_bench"
/usr/bin/python3 bench/torch_step_bench.py --transport shm --modes terse:none,horovod:none,terse:fp16,horovod:fp16 --rounds 3 --steps 80 --warmup 10
L "allreduce_bench"
bench/run_allreduce_bench.sh 4 --min_bytes=1048576 --max_bytes=67108864 --budget_bytes=134217728 --rounds=2 2>&1 | grep -v "^INFO\|^Loading\|^Analyzing\|^Target\|^  bazel"
L "done"
