#!/bin/bash
# Runs every test of terse: set-up, then four stages (docs/reliability.md):
#   1. bazel test //...: unit tests, loopback multi-rank tests, mpirun tests
#      with 2 and 4 ranks (fault injection, checkpoint kill/resume), Python
#      and TensorFlow tests; GPU tests only where a device answers.
#   2. ASan+UBSan (--config=asan): //tests:asan, the unit and loopback
#      tests of common, collectives, compressors, gravac, efcp and engine
#      and the fuzz corpus replays.
#   3. TSan (--config=tsan): //tests:tsan, the threaded engine, collectives
#      and kernel tests.
#   4. every libFuzzer target for TERSE_FUZZ_SECONDS (default 20) seconds.
# Stages 2-4 build in their own Bazel output bases (suffixes -asan, -tsan,
# -fuzz beside the default one), so none invalidates another's cache.
# Counts: each Bazel test target of each stage and each fuzz target run is
# one test. Ends with "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh || exit 1

# What the sanitizer stages test (tests/BUILD lists them and says what is
# left out for time).
ASAN_SCOPE=(//tests:asan)
TSAN_SCOPE=(//tests:tsan)
FUZZ_SECONDS=${TERSE_FUZZ_SECONDS:-20}

passed=0
failed=0
timings=()
main_base=$(bazel info output_base 2>/dev/null) || exit 1

# bazel_stage NAME BAZEL_ARGS...: one `bazel ... test` whose test targets
# count; a failed build with no test result counts as one failure.
bazel_stage() {
  local name=$1 start=$SECONDS log p f status
  shift
  log=$(mktemp)
  echo "=== test.sh: stage $name: bazel $*"
  bazel "$@" --test_summary=short 2>&1 | tee "$log"
  status=${PIPESTATUS[0]}
  p=$(grep -cE '^//\S+\s+(\(cached\) )?PASSED' "$log")
  f=$(grep -cE '^//\S+\s+(\(cached\) )?(FAILED|TIMEOUT|NO STATUS|INCOMPLETE|FLAKY)' "$log")
  if [ "$status" -ne 0 ] && [ "$f" -eq 0 ]; then
    f=1  # The build itself failed: no test could run.
  fi
  rm -f "$log"
  passed=$((passed + p))
  failed=$((failed + f))
  timings+=("$name: $p passed, $f failed, $((SECONDS - start)) s")
}

filters="-gpu"
if tools/has_gpu.sh; then filters=""; fi
bazel_stage main test //... --test_tag_filters="$filters"

bazel_stage asan --output_base="${main_base}-asan" test --config=asan \
  --build_tests_only "${ASAN_SCOPE[@]}"
bazel --output_base="${main_base}-asan" shutdown >/dev/null 2>&1

bazel_stage tsan --output_base="${main_base}-tsan" test --config=tsan \
  --build_tests_only "${TSAN_SCOPE[@]}"
bazel --output_base="${main_base}-tsan" shutdown >/dev/null 2>&1

# Fuzzing: one test per target ("run_fuzzers: T ok" / "T FAILED"); a build
# failure (no target ran) counts as one failure.
start=$SECONDS
log=$(mktemp)
echo "=== test.sh: stage fuzz: tests/fuzz/run_fuzzers.sh $FUZZ_SECONDS"
tests/fuzz/run_fuzzers.sh "$FUZZ_SECONDS" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
p=$(grep -cE '^run_fuzzers: \S+ ok:' "$log")
f=$(grep -cE '^run_fuzzers: \S+ FAILED' "$log")
if [ "$status" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
rm -f "$log"
passed=$((passed + p))
failed=$((failed + f))
timings+=("fuzz: $p passed, $f failed, $((SECONDS - start)) s")

echo "=== test.sh: stages"
printf '  %s\n' "${timings[@]}"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
