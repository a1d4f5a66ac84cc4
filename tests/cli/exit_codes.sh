#!/bin/bash
# exit_codes.sh WXTRAIN DIR README — each exit code has one meaning (core/error.h, ExitCode), and the
# README's table lists them: 0 done, 1 the work failed, 2 the input is wrong, 3 the answer is no.
# One command for each, on the files of make_bad_data.sh.
set -u
wxtrain="$1"
dir="$2"
readme="$3"
fail=0
expect() {  # expect CODE WHAT COMMAND...
  local want="$1" what="$2"
  shift 2
  out="$("$@" 2>&1)"
  local code=$?
  if [ "$code" -eq "$want" ]; then echo "ok: exit $want: $what"; else
    printf '%s\n' "$out" | tail -n 3; echo "FAIL: exit $code for $what, expected $want"; fail=1; fi
}
cd "$dir" || exit 1
expect 0 "an estimate that fits" "$wxtrain" estimate -c good.toml --gpu T4
expect 1 "data that cannot be read" "$wxtrain" train -q -c corrupt.toml
expect 2 "a key the run file cannot have" "$wxtrain" estimate -c good.toml --set train.batchsize=4
expect 2 "a number out of range on the command line" "$wxtrain" estimate -c good.toml --batch 0
expect 2 "a duration that cannot be read" "$wxtrain" train -q -c bad_duration.toml
expect 3 "an estimate that fits no GPU asked about" "$wxtrain" estimate -c good.toml --gpu T4 --batch 200000
for code in 0 1 2 3; do
  grep -qE "^\| $code \| " "$readme" || { echo "FAIL: the README's exit-code table has no row for $code"; fail=1; }
done
exit $fail
