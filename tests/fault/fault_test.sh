#!/bin/bash
# A fault scenario of fault_main.cc under mpirun -np 4, with its assertions.
#   fault_test.sh SCENARIO MPIRUN_SH FAULT_MAIN
# SCENARIO: kill | stall_warning | stall_shutdown | corrupt | mismatch.
# Bounded: mpirun is killed after TERSE_MPIRUN_TIMEOUT (90 s here), which
# fails the test (a hang is a failure, never a pass).
set -u
scenario=$1
mpirun_sh=$2
bin=$3
np=4
victim=$((np - 1))
out=${TEST_TMPDIR:-/tmp}/fault_$scenario.txt
export TERSE_MPIRUN_TIMEOUT=90 TERSE_CYCLE_TIME_MS=1

failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
# Every rank printed a line containing the fixed string $1.
expect_each_rank() {
  local r
  for ((r = 0; r < np; r++)); do
    grep -F "fault: rank $r: " "$out" | grep -qF -- "$1" ||
      fail "rank $r did not print '$1'"
  done
}
expect_line() { grep -qF -- "$1" "$out" || fail "no line with '$1'"; }
expect_no_line() { ! grep -qE -- "$1" "$out" || fail "unexpected '$1'"; }
# Runs the scenario; a run that lasted the whole bound was killed by it
# (mpirun.sh's timeout), i.e. it hung. (The exit status cannot tell: a rank
# killed by SIGKILL also makes mpirun exit 137.)
run() {
  local start_ms
  start_ms=$(date +%s%3N)
  "$mpirun_sh" "$np" "$bin" "$1" >"$out" 2>&1
  rc=$?
  end_ms=$(date +%s%3N)
  if [ $((end_ms - start_ms)) -ge $((TERSE_MPIRUN_TIMEOUT * 1000 - 500)) ]; then
    fail "hung: killed by the ${TERSE_MPIRUN_TIMEOUT} s bound"
  fi
}

case $scenario in
  kill)
    run kill
    [ "$rc" -ne 0 ] || fail "mpirun exited 0 after a rank was killed"
    kill_ms=$(sed -n "s/^fault: rank $victim: killing itself at \([0-9]*\)$/\1/p" "$out")
    if [ -z "$kill_ms" ]; then
      fail "rank $victim never reached the kill"
    elif [ $((end_ms - kill_ms)) -gt 30000 ]; then
      fail "the job took $((end_ms - kill_ms)) ms after the kill to end (> 30 s)"
    else
      echo "job ended $((end_ms - kill_ms)) ms after rank $victim was killed"
    fi
    # Open MPI ends the job and names the lost rank and the signal.
    grep -qE "process rank $victim with PID [0-9]+ on node .* exited on signal 9" \
      "$out" || fail "mpirun's message does not name rank $victim and signal 9"
    # No rank finished the step the victim never contributed to.
    expect_no_line "allreduce step ([3-9]) ok"
    ;;
  stall_warning)
    export TERSE_STALL_CHECK_SECONDS=1 FAULT_LATE_SECONDS=4
    run stall
    [ "$rc" -eq 0 ] || fail "exit $rc: a late rank must only cause a warning"
    expect_line "stalled operations (waiting more than 1 s; TERSE_STALL_CHECK_SECONDS): tensor 'grad.b' submitted by ranks 0,1,2 but not by rank $victim"
    expect_each_rank "allreduce grad.b ok"
    ;;
  stall_shutdown)
    export TERSE_STALL_CHECK_SECONDS=1 TERSE_STALL_SHUTDOWN_SECONDS=3
    run stall
    [ "$rc" -ne 0 ] || fail "mpirun exited 0 although the job stalled"
    expect_line "stalled operations (waiting more than 1 s; TERSE_STALL_CHECK_SECONDS): tensor 'grad.b' submitted by ranks 0,1,2 but not by rank $victim"
    expect_each_rank "failed: stalled for more than 3 s (TERSE_STALL_SHUTDOWN_SECONDS): "
    expect_each_rank "tensor 'grad.b' submitted by ranks 0,1,2 but not by rank $victim"
    ;;
  corrupt)
    export TERSE_COMPRESSION=topk TERSE_CF=10 TERSE_MIN_COMPRESS_BYTES=0
    export TERSE_TEST_CORRUPT_PAYLOAD_RANK=$victim
    run corrupt
    [ "$rc" -ne 0 ] || fail "mpirun exited 0 although a payload was corrupt"
    expect_each_rank "compressed allreduce failed: "
    expect_each_rank "the topk payload from rank $victim does not decode"
    expect_no_line "signal|Segmentation|Sanitizer|core dumped"
    ;;
  mismatch)
    run mismatch
    expect_each_rank "allreduce w failed: tensor 'w': shape [4] on ranks 0,2,3 but [5] on rank 1"
    expect_each_rank "allreduce dt failed: tensor 'dt': dtype f32 on ranks 0,1,2 but f64 on rank $victim"
    expect_each_rank "allreduce ok ok"
    ;;
  *)
    fail "unknown scenario $scenario"
    ;;
esac

echo "---- output of the $scenario scenario (mpirun exit $rc) ----"
cat "$out"
if [ "$failures" -ne 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all checks passed"
