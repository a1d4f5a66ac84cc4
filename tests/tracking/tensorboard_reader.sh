#!/bin/bash
# tensorboard_reader.sh WXTRAIN PYTHON DIR — a run with tracking.tensorboard = true writes event
# files that TensorBoard's own reader (check_tensorboard.py, PYTHON with the tensorboard package:
# scripts/install_tracking_test_deps.sh) reads back equal to metrics.csv; a resumed run adds its
# steps to the same TensorBoard run; an ensemble run's rank histograms are there, equal to
# validation.csv's (check_rank_histogram.py); under mpirun -np 2 only rank 0 writes.
set -u
wxtrain="$1"; python="$2"; dir="$3"
here="$(cd "$(dirname "$0")" && pwd)"
if [ ! -x "$python" ]; then
  echo "FAIL: $python is missing: run scripts/install_tracking_test_deps.sh (mlflow and tensorboard for the tests)"
  exit 1
fi
rm -rf "$dir"; mkdir -p "$dir"
fail=0
check() { local name="$1"; shift; if "$@"; then echo "ok: $name"; else echo "FAIL: $name"; fail=1; fi; }

echo "=== 8 steps with TensorBoard on"
run="$dir/tb_run"
out="$("$wxtrain" train -q -c "$here/storm_tracking.toml" --set train.out_dir="$run" --set tracking.tensorboard=true 2>&1)"; code=$?
printf '%s\n--- exit status %s\n' "$out" "$code"
check "exit status 0" test "$code" -eq 0
check "TensorBoard's reader finds metrics.csv's losses" "$python" "$here/check_tensorboard.py" "$run"

echo "=== --resume to 12 steps: the same TensorBoard run continues"
out="$("$wxtrain" train -q -c "$here/storm_tracking.toml" --set train.out_dir="$run" --set tracking.tensorboard=true \
  --set train.steps=12 --resume 2>&1)"; code=$?
printf '%s\n--- exit status %s\n' "$out" "$code"
check "exit status 0" test "$code" -eq 0
check "steps 1-12 once each, equal to metrics.csv" "$python" "$here/check_tensorboard.py" "$run"

echo "=== tracking.tensorboard_dir: <dir>/<run name>, for comparing runs"
out="$("$wxtrain" train -q -c "$here/storm_tracking.toml" --set train.out_dir="$dir/named" --set train.steps=2 \
  --set tracking.tensorboard=true --set tracking.tensorboard_dir="$dir/tb" --set tracking.run_name=lr2e-3 2>&1)"; code=$?
check "exit status 0" test "$code" -eq 0
check "event file in $dir/tb/lr2e-3" compgen -G "$dir/tb/lr2e-3/events.out.tfevents.*"
check "none in the run folder" test -z "$(compgen -G "$dir/named/events.out.tfevents.*")"

echo "=== an ensemble of 3 members: its rank histograms as scalars, equal to validation.csv's"
run="$dir/ensemble"
out="$("$wxtrain" train -q -c "$here/storm_tracking.toml" --set train.out_dir="$run" --set tracking.tensorboard=true \
  --set train.ensemble_members=3 --set train.steps=4 --set train.val_lead_steps=3 2>&1)"; code=$?
printf '%s\n--- exit status %s\n' "$out" "$code"
check "exit status 0" test "$code" -eq 0
check "TensorBoard's reader finds the rank histograms" "$python" "$here/check_rank_histogram.py" tensorboard "$run"

if command -v mpirun >/dev/null; then
  echo "=== mpirun -np 2: rank 0 writes, rank 1 logs nothing"
  out="$(mpirun -np 2 --allow-run-as-root --oversubscribe "$wxtrain" train -q -c "$here/storm_tracking.toml" \
    --set train.out_dir="$dir/np2" --set train.steps=4 --set tracking.tensorboard=true 2>&1)"; code=$?
  printf '%s\n--- exit status %s\n' "$out" "$code"
  check "exit status 0" test "$code" -eq 0
  check "one event file" test "$(compgen -G "$dir/np2/events.out.tfevents.*" | wc -l)" -eq 1
  check "its losses are metrics.csv's" "$python" "$here/check_tensorboard.py" "$dir/np2"
fi
[ "$fail" -eq 0 ] && echo "PASS" || echo "FAILED"
exit "$fail"
