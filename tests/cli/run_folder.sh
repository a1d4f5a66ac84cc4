#!/bin/bash
# run_folder.sh WXTRAIN DIR — a run folder belongs to one run. A second `wxtrain train` into a
# folder holding a run is refused (exit 2, the message offers --resume, --overwrite or a new folder)
# and leaves that run's files as they were; --resume continues it and appends its command line to
# command.txt; --overwrite starts afresh. run.toml holds the run file with the --set values written
# in, and reproduces the run. DIR holds good.toml from make_bad_data.sh.
set -u
wxtrain="$1"
dir="$2"
run="$dir/run_folder"
rm -rf "$run" "$dir/run_folder_copy"
fail=0
check() {
  local name="$1"; shift
  if "$@"; then echo "ok: $name"; else echo "FAIL: $name"; fail=1; fi
}
train() { "$wxtrain" train -q -c "$dir/good.toml" --set train.out_dir="$run" --set train.checkpoint_every=1 "$@" 2>&1; }

echo "=== a first run"
out="$(train --set train.steps=2)"; code=$?
printf '%s\n--- exit status %s\n' "$out" "$code"
check "exit status 0" test "$code" -eq 0
check "run.toml has the --set values written in" grep -qE "^steps = 2" "$run/run.toml"
check "run.toml still has the rest of the run file" grep -q "Pstorm.cdf" "$run/run.toml"
check "command.txt has the command line" grep -qE "train -q -c $dir/good.toml --set train.out_dir=$run .*--set train.steps=2$" "$run/command.txt"
cp -r "$run" "$dir/run_folder_copy"

echo "=== a second run into the same folder"
out="$(train --set train.steps=3)"; code=$?
printf '%s\n--- exit status %s\n' "$out" "$code"
check "exit status 2" test "$code" -eq 2
check "the message offers --resume, --overwrite and a new folder" \
  grep -qE "^error: train.out_dir = \"$run\" already holds another run \(checkpoint.pt, metrics.csv, validation.csv, validation.svg, run.toml, command.txt\): continue it with --resume, start afresh with --overwrite \(replaces that run's files\), or give this run its own folder, e.g. --set train.out_dir=${run}_2$" <<<"$out"
check "the first run's files are untouched" diff -r "$dir/run_folder_copy" "$run"

echo "=== --resume continues it"
out="$(train --set train.steps=4 --resume)"; code=$?
printf '%s\n--- exit status %s\n' "$out" "$code"
check "exit status 0" test "$code" -eq 0
check "finished at step 4" grep -q "finished at step 4 of 4" <<<"$out"
check "metrics.csv holds steps 1-4" test "$(cut -d, -f1 "$run/metrics.csv" | tail -n +2 | tr '\n' ' ')" = "1 2 3 4 "
check "command.txt has both commands" test "$(grep -c "^$wxtrain train" "$run/command.txt")" -eq 2
check "command.txt says where the second began" grep -q "resumed at step 2" "$run/command.txt"
check "run.toml is the resumed run's" grep -qE "^steps = 4" "$run/run.toml"

echo "=== --overwrite starts afresh"
out="$(train --set train.steps=1 --overwrite)"; code=$?
printf '%s\n--- exit status %s\n' "$out" "$code"
check "exit status 0" test "$code" -eq 0
check "finished at step 1" grep -q "finished at step 1 of 1" <<<"$out"
check "metrics.csv holds step 1 only" test "$(cut -d, -f1 "$run/metrics.csv" | tail -n +2 | tr '\n' ' ')" = "1 "
check "command.txt has this command only" test "$(grep -c "^$wxtrain train" "$run/command.txt")" -eq 1

echo "=== run.toml reproduces the run"
out="$("$wxtrain" train -q -c "$run/run.toml" --set train.out_dir="$dir/run_folder_replay" --overwrite 2>&1)"; code=$?
check "training from run.toml works" test "$code" -eq 0
check "same losses as the run it records" cmp -s <(cut -d, -f1-5 "$run/metrics.csv") <(cut -d, -f1-5 "$dir/run_folder_replay/metrics.csv")

echo "=== --resume with --overwrite is a usage error"
out="$(train --resume --overwrite)"; code=$?
printf '%s\n--- exit status %s\n' "$out" "$code"
check "exit status 2" test "$code" -eq 2
check "the message says they exclude each other" grep -q "excludes" <<<"$out"

[ "$fail" = 0 ] && echo PASS
exit $fail
