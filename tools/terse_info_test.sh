#!/bin/bash
# terse_info prints the build and config, and rejects bad TERSE_* values with
# exit code 2 and a message naming the variable, the value and the accepted form.
set -u
bin=tools/terse_info
fail=0
check() {  # check DESCRIPTION CONDITION...
  local what=$1; shift
  if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; fail=1; fi
}

out=$($bin 2>&1); rc=$?
check "runs" test $rc -eq 0
check "prints version" grep -q '^terse [0-9]' <<<"$out"
check "prints backends" grep -q 'backend mpi:  built' <<<"$out"
check "prints nccl" grep -q 'backend nccl: built (NCCL 2\.' <<<"$out"
check "prints config" grep -q 'TERSE_FUSION_THRESHOLD = 67108864' <<<"$out"

out=$(TERSE_FUSION_THRESHOLD=abc $bin 2>&1); rc=$?
check "bad value exits 2" test $rc -eq 2
check "bad value named" grep -q "TERSE_FUSION_THRESHOLD='abc' is invalid: expected an integer in \[0, 1099511627776\] (bytes)" <<<"$out"

out=$(TERSE_FUSON_THRESHOLD=1 $bin 2>&1); rc=$?
check "typo exits 2" test $rc -eq 2
check "typo suggestion" grep -q "unknown variable TERSE_FUSON_THRESHOLD='1'; did you mean TERSE_FUSION_THRESHOLD?" <<<"$out"

out=$($bin --knobs); rc=$?
check "knob table" grep -q 'TERSE_GRAVAC_WINDOW' <<<"$out"
[ $fail -eq 0 ] || { echo "$out"; exit 1; }
