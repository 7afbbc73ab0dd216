#!/bin/bash
# Builds every libFuzzer target with clang (--config=fuzz) and runs each for
# SECONDS seconds from its seed corpus; fails on the first crash, leak,
# sanitizer report, timeout or broken invariant.
#
#   tests/fuzz/run_fuzzers.sh SECONDS [TARGET...]   (default: all targets)
#
# The clang build lives in its own Bazel output base (next to the default
# one, suffix -fuzz) so it never invalidates the gcc build. New inputs found
# while fuzzing go to a temporary directory, not into the checked-in corpus;
# a crashing input is kept under $TERSE_FUZZ_ARTIFACTS (default
# /tmp/terse-fuzz-artifacts) for a reproducer:
#   <output_base>/.../tests/fuzz/<target>_fuzzer CRASH_FILE
set -uo pipefail
cd "$(dirname "$0")/../.."

seconds=${1:?usage: run_fuzzers.sh SECONDS [TARGET...]}
shift
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(payload control config)

main_base=$(bazel info output_base 2>/dev/null) || exit 1
fuzz_base="${main_base}-fuzz"
bz=(bazel --output_base="$fuzz_base")
labels=()
for t in "${targets[@]}"; do labels+=("//tests/fuzz:${t}_fuzzer"); done

echo "run_fuzzers: building ${labels[*]} with clang (output base $fuzz_base)"
# gold (Bazel's autodetected linker) warns "Cannot export local symbol
# __asan_..." hundreds of times for ASan binaries; harmless, filtered.
"${bz[@]}" build --config=fuzz "${labels[@]}" 2>&1 |
  grep -v "Cannot export local symbol"
[ "${PIPESTATUS[0]}" -eq 0 ] || exit 1
bin_dir=$("${bz[@]}" info --config=fuzz bazel-bin 2>/dev/null) || exit 1

artifacts=${TERSE_FUZZ_ARTIFACTS:-/tmp/terse-fuzz-artifacts}
mkdir -p "$artifacts"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

failed=0
for t in "${targets[@]}"; do
  mkdir -p "$work/$t"
  log="$work/$t.log"
  # -timeout: one input taking longer is a hang (a failure); -rss_limit_mb
  # bounds memory; max_len above the largest seed (a dense 1000-float
  # payload is about 4 KB; config lines and control lists are short).
  case $t in
    payload) max_len=8192 ;;
    *) max_len=2048 ;;
  esac
  "$bin_dir/tests/fuzz/${t}_fuzzer" \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -max_len="$max_len" -print_final_stats=1 \
    -artifact_prefix="$artifacts/${t}-" \
    "$work/$t" "tests/fuzz/corpus/$t" >"$log" 2>&1
  rc=$?
  runs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" |
    grep -oE '[0-9]+$')
  cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1)
  if [ $rc -ne 0 ]; then
    echo "run_fuzzers: $t FAILED (exit $rc); last lines of its log:"
    tail -n 40 "$log"
    failed=1
  else
    echo "run_fuzzers: $t ok: ${runs:-?} inputs in ${seconds}s, ${cov:-cov ?}," \
      "$(find "$work/$t" -type f | wc -l) new corpus entries"
  fi
done

"${bz[@]}" shutdown >/dev/null 2>&1
exit $failed
