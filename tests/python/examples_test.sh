#!/bin/bash
# The Horovod-style examples run briefly under mpirun, unchanged:
#   tests/python/examples_test.sh NP SCRIPT
# (SCRIPT: examples/pytorch_fashion_mnist.py; the benchmark sits beside it.)
# Checks: the only line of each example that names terse is the import
# `import terse.torch as hvd` (so with Horovod's import they are Horovod
# scripts); the benchmark prints its total; Fashion-MNIST after training on
# 12,000 images (one pass) reaches a test accuracy far above chance (10%):
# at least 40% (a run measured 59.8% on 2 ranks).
set -eu
np=$1
mnist=$2
bench="$(dirname "$mnist")/pytorch_synthetic_benchmark.py"
for script in "$mnist" "$bench"; do
  lines=$(grep -n -i terse "$script" || true)
  if [ "$lines" != "$(grep -n '^import terse.torch as hvd$' "$script")" ]; then
    echo "FAIL: $script names terse beyond its import:"; echo "$lines"; exit 1
  fi
done
out=$(tests/python/run_py_mpi.sh "$np" "$bench" --num-iters 2 \
  --num-batches-per-iter 2 --batch-size 8 2>&1) || { echo "$out"; exit 1; }
echo "$out" | tail -3
echo "$out" | grep -q "^Total img/sec on $np CPU(s): " ||
  { echo "FAIL: no benchmark total"; exit 1; }
out=$(tests/python/run_py_mpi.sh "$np" "$mnist" --epochs 1 \
  --max-train-samples 12000 --log-interval 50 2>&1) || { echo "$out"; exit 1; }
echo "$out" | tail -4
accuracy=$(echo "$out" | sed -n 's/.*Accuracy: \([0-9.]*\)%.*/\1/p' | tail -1)
if [ -z "$accuracy" ] || ! awk -v a="$accuracy" 'BEGIN { exit !(a >= 40) }'; then
  echo "FAIL: test accuracy '${accuracy}'% below 40%"; exit 1
fi
echo "PASS: examples ran; Fashion-MNIST test accuracy ${accuracy}%"
