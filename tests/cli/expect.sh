#!/bin/bash
# expect.sh EXIT REGEX -- COMMAND...
# Runs COMMAND (stdout and stderr together) and passes when its exit status is EXIT ("nonzero" for
# any failure) and its output matches the extended regular expression REGEX. Prints the output
# either way, so a failure shows what the user would have seen.
set -u
expected="$1"
regex="$2"
shift 2
[ "${1:-}" = "--" ] && shift
output="$("$@" 2>&1)"
code=$?
printf '%s\n' "$output"
echo "--- exit status $code"
if [ "$expected" = "nonzero" ]; then
  if [ "$code" -eq 0 ]; then echo "FAIL: expected a non-zero exit status"; exit 1; fi
elif [ "$code" -ne "$expected" ]; then
  echo "FAIL: expected exit status $expected"; exit 1
fi
# A crash or an uncaught exception is never a clear message.
if [ "$code" -ge 128 ] || grep -qE "terminate called|Exception raised from|Segmentation fault" <<<"$output"; then
  echo "FAIL: crashed instead of reporting the error"; exit 1
fi
if ! grep -qE -- "$regex" <<<"$output"; then echo "FAIL: output does not match /$regex/"; exit 1; fi
echo "PASS"
