#!/bin/bash
# Runs every test of terse: set-up, then `bazel test //...` (unit tests,
# loopback multi-rank tests, mpirun tests with 2 and 4 ranks, Python tests),
# GPU tests only where a device answers. Ends with "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh || exit 1

log=$(mktemp)
filters="-gpu"
if tools/has_gpu.sh; then filters=""; fi
bazel test //... --test_tag_filters="$filters" --test_summary=short 2>&1 | tee "$log"
status=${PIPESTATUS[0]}

passed=$(grep -cE '^//\S+\s+(\(cached\) )?PASSED' "$log")
failed=$(grep -cE '^//\S+\s+(\(cached\) )?(FAILED|TIMEOUT|NO STATUS|INCOMPLETE|FLAKY)' "$log")
if [ "$status" -ne 0 ] && [ "$failed" -eq 0 ]; then
  failed=1  # The build itself failed: no test could run.
fi
rm -f "$log"
echo "$passed passed, $failed failed"
[ "$status" -eq 0 ] && [ "$failed" -eq 0 ]
