#!/bin/bash
# disk_full.sh WXTRAIN DIR — every write of a run on a full disk (a small tmpfs) ends in
# "error: cannot write <file>: No space left on device", exit 1, no crash, no partial or .tmp file,
# and what was written before survives:
#   1. a checkpoint that does not fit: the previous checkpoint stays, forecast reads it, and once
#      there is space --resume continues from it to the end;
#   2. metrics.csv / validation.csv filling the disk: the file ends at its last complete row;
#   3. tune-batch --write: the run file is unchanged;
#   4. profile --csv: no file, no .tmp;
#   5. a read-only folder: "Read-only file system", exit 1.
# DIR holds good.toml from make_bad_data.sh. Mounting needs root: exits 77 (skipped) without it.
set -u
wxtrain="$1"
dir="$2"
mnt="$dir/disk_full_mnt"
mkdir -p "$mnt"
cleanup() { umount "$mnt" 2>/dev/null; }
trap cleanup EXIT
umount "$mnt" 2>/dev/null
if ! mount -t tmpfs -o size=64k tmpfs "$mnt" 2>/dev/null; then
  echo "SKIP: cannot mount a tmpfs here (needs root and mount permission)"; exit 77
fi
umount "$mnt"
fail=0
check() {  # check NAME CONDITION-COMMAND...
  local name="$1"; shift
  if "$@"; then echo "ok: $name"; else echo "FAIL: $name"; fail=1; fi
}
crash_free() { ! grep -qE "terminate called|Exception raised from|Segmentation fault|Aborted" <<<"$1"; }
small=(--set train.steps=4 --set train.checkpoint_every=2 --set train.val_every=0 --set data.prefetch=0)

# The size of one checkpoint of this run, measured on the real disk.
"$wxtrain" train -q -c "$dir/good.toml" "${small[@]}" --set train.out_dir="$dir/disk_full_sizing" --overwrite \
  >/dev/null 2>&1 || { echo "FAIL: the sizing run failed"; exit 1; }
ckpt=$(stat -c %s "$dir/disk_full_sizing/checkpoint.pt")
echo "one checkpoint: $ckpt bytes"

echo "=== 1. the second checkpoint does not fit"
# Room for one checkpoint and the small files, not for the second one's checkpoint.pt.tmp.
mount -t tmpfs -o size=$((ckpt + ckpt / 2 + 65536)) tmpfs "$mnt"
out="$("$wxtrain" train -q -c "$dir/good.toml" "${small[@]}" --set train.out_dir="$mnt/run" 2>&1)"
code=$?
printf '%s\n--- exit status %s\n' "$out" "$code"
check "exit status 1" test "$code" -eq 1
check "no crash" crash_free "$out"
check "message names the checkpoint and the cause" \
  grep -qE "^error: cannot write $mnt/run/checkpoint\.pt: No space left on device; checkpoint\.pt still holds step 2: free some space, then continue with --resume" <<<"$out"
check "no checkpoint.pt.tmp left" test ! -e "$mnt/run/checkpoint.pt.tmp"
check "forecast reads the step-2 checkpoint" \
  "$wxtrain" forecast --checkpoint "$mnt/run/checkpoint.pt" -o "$dir/disk_full_forecast.nc" --steps 1
mount -o remount,size=$((4 * ckpt + 1048576)) "$mnt"
out="$("$wxtrain" train -q -c "$dir/good.toml" "${small[@]}" --set train.out_dir="$mnt/run" --resume 2>&1)"
code=$?
printf '%s\n' "$out"
check "--resume continues from step 2 to the end" grep -q "finished at step 4 of 4" <<<"$out"
check "metrics.csv has steps 1-4 once each" test "$(cut -d, -f1 "$mnt/run/metrics.csv" | tail -n +2 | tr '\n' ' ')" = "1 2 3 4 "
umount "$mnt"

echo "=== 2. metrics.csv fills the disk"
# Three 4 KiB pages: run.toml, command.txt and the first page of metrics.csv.
mount -t tmpfs -o size=12k tmpfs "$mnt"
out="$("$wxtrain" train -q -c "$dir/good.toml" --set train.steps=400 --set train.checkpoint_every=0 \
  --set train.val_every=0 --set model.channels=[4] --set model.groups=4 --set train.out_dir="$mnt/run" 2>&1)"
code=$?
printf '%s\n--- exit status %s\n' "$out" "$code"
check "exit status 1" test "$code" -eq 1
check "no crash" crash_free "$out"
check "message names the CSV and the cause" \
  grep -qE "^error: cannot write $mnt/run/(metrics|validation)\.csv: No space left on device; no checkpoint of this run was written yet" <<<"$out"
check "metrics.csv ends with a complete row" test "$(tail -c 1 "$mnt/run/metrics.csv" | od -An -c | tr -d ' ')" = '\n'
umount "$mnt"

echo "=== 3. tune-batch --write on a full disk"
mount -t tmpfs -o size=8k tmpfs "$mnt"
cp "$dir/good.toml" "$mnt/run.toml"
head -c 1M /dev/zero >"$mnt/filler" 2>/dev/null
out="$("$wxtrain" tune-batch -c "$mnt/run.toml" --max-batch 4 --probe-steps 1 --write 2>&1)"
code=$?
printf '%s\n--- exit status %s\n' "$out" "$code"
check "exit status 1" test "$code" -eq 1
check "no crash" crash_free "$out"
check "message names the run file" \
  grep -qE "^error: cannot write $mnt/run\.toml: No space left on device; the run file is unchanged" <<<"$out"
check "the run file is unchanged" cmp -s "$dir/good.toml" "$mnt/run.toml"
check "no run.toml.tmp left" test ! -e "$mnt/run.toml.tmp"

echo "=== 4. profile --csv on a full disk"
out="$("$wxtrain" profile -c "$dir/good.toml" --steps 1 --csv "$mnt/profile.csv" 2>&1)"
code=$?
printf '%s\n--- exit status %s\n' "$out" "$code"
check "exit status 1" test "$code" -eq 1
check "message names the CSV" grep -qE "^error: cannot write $mnt/profile\.csv: No space left on device" <<<"$out"
check "no profile.csv or .tmp left" test ! -e "$mnt/profile.csv" -a ! -e "$mnt/profile.csv.tmp"
umount "$mnt"

echo "=== 5. a read-only folder"
mount -t tmpfs -o size=64k,ro tmpfs "$mnt"
out="$("$wxtrain" train -q -c "$dir/good.toml" --set train.out_dir="$mnt/run" 2>&1)"
code=$?
printf '%s\n--- exit status %s\n' "$out" "$code"
check "exit status 1" test "$code" -eq 1
check "message names the folder and why" grep -qE "^error: cannot write $mnt/run: .*Read-only file system" <<<"$out"
umount "$mnt"

[ "$fail" = 0 ] && echo PASS
exit $fail
