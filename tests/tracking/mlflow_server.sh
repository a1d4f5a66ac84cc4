#!/bin/bash
# mlflow_server.sh WXTRAIN PYTHON DIR — training against a real MLflow server (`mlflow server` from
# PYTHON's environment, scripts/install_tracking_test_deps.sh), on 127.0.0.1 with a SQLite store in
# DIR, read back with MLflow's Python client (check_mlflow.py):
#   1. server up: the run's parameters, every step's loss, the validation scores and artifacts;
#      an ensemble run's rank histograms (check_rank_histogram.py);
#   2. server killed mid-run: training finishes (exit 0) and keeps what it could not send in the
#      run folder; `wxtrain sync` then fails naming the server while it is down, and once it is
#      back brings the run to the same contents as run 1's;
#   3. a resumed run continues the same MLflow run;
#   4. an HTTP error from the server is named with its status.
# The server is stopped on exit, whatever happens.
set -u
wxtrain="$1"; python="$2"; dir="$3"
here="$(cd "$(dirname "$0")" && pwd)"
if [ ! -x "$python" ]; then
  echo "FAIL: $python is missing: run scripts/install_tracking_test_deps.sh (mlflow and tensorboard for the tests)"
  exit 1
fi
mlflow="$(dirname "$python")/mlflow"
rm -rf "$dir"; mkdir -p "$dir"
fail=0
check() { local name="$1"; shift; if "$@"; then echo "ok: $name"; else echo "FAIL: $name"; fail=1; fi; }
port="$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
uri="http://127.0.0.1:$port"
server=""
start_server() {
  # Its own process group, so stopping it stops its workers too.
  setsid "$mlflow" server --host 127.0.0.1 --port "$port" --workers 1 \
    --backend-store-uri "sqlite:///$dir/mlflow.db" --artifacts-destination "$dir/artifacts" >>"$dir/server.log" 2>&1 &
  server=$!
  for _ in $(seq 1 240); do
    "$python" -c "import urllib.request; urllib.request.urlopen('$uri/health', timeout=1)" 2>/dev/null && return 0
    kill -0 "$server" 2>/dev/null || break
    sleep 0.5
  done
  echo "FAIL: mlflow server did not start on $uri (log: $dir/server.log)"; tail -20 "$dir/server.log"; exit 1
}
stop_server() {
  [ -n "$server" ] || return 0
  kill -KILL -- "-$server" 2>/dev/null
  wait "$server" 2>/dev/null
  server=""
}
trap stop_server EXIT
train() { "$wxtrain" train -q -c "$here/storm_tracking.toml" --set tracking.mlflow_uri="$uri" "$@" 2>&1; }

echo "=== 1. a run against the server ($uri)"
start_server
out="$(train --set train.out_dir="$dir/up")"; code=$?
printf '%s\n--- exit status %s\n' "$out" "$code"
check "exit status 0" test "$code" -eq 0
check "the run's page is printed" grep -q "MLflow: run [0-9a-f]* at $uri/#/experiments/" <<<"$out"
check "MLflow holds the run file, every loss, the scores and validation.svg" \
  "$python" "$here/check_mlflow.py" "$uri" "$dir/up"

echo "=== 1b. an ensemble of 3 members: its rank histograms, equal to validation.csv's"
out="$(train --set train.out_dir="$dir/ensemble" --set train.ensemble_members=3 --set train.steps=4 \
  --set train.val_lead_steps=3)"; code=$?
printf '%s\n--- exit status %s\n' "$out" "$code"
check "exit status 0" test "$code" -eq 0
check "MLflow holds the rank histograms as validation.csv has them" \
  "$python" "$here/check_rank_histogram.py" mlflow "$uri" "$dir/ensemble"

echo "=== 2. the server killed mid-run"
# 0.4 s per batch: 30 steps take long enough to kill the server after the first sends.
train --set train.out_dir="$dir/killed" --set train.steps=30 --set train.val_every=10 --set data.load_delay_ms=400 \
  --set tracking.timeout=2 >"$dir/killed.log" &
trainer=$!
for _ in $(seq 1 200); do
  grep -qE '"sent": [1-9]' "$dir/killed/mlflow/state.json" 2>/dev/null && \
    [ "$(grep -c . "$dir/killed/metrics.csv" 2>/dev/null || echo 0)" -ge 4 ] && break
  sleep 0.2
done
stop_server
echo "server killed after step $(tail -n 1 "$dir/killed/metrics.csv" | cut -d, -f1)"
wait "$trainer"; code=$?
cat "$dir/killed.log"; echo "--- exit status $code"
check "training finished: exit 0" test "$code" -eq 0
check "finished at step 30" grep -q "finished at step 30 of 30" "$dir/killed.log"
check "the warning names the server" grep -q "warning: MLflow at $uri did not answer" "$dir/killed.log"
check "and says how to send the rest" grep -q "wxtrain sync $dir/killed" "$dir/killed.log"
out="$("$wxtrain" sync "$dir/killed" 2>&1)"; code=$?
printf '%s\n--- exit status %s\n' "$out" "$code"
check "sync while the server is down: exit 1" test "$code" -eq 1
check "sync names the server" grep -q "^error: MLflow at $uri did not answer" <<<"$out"
start_server
out="$("$wxtrain" sync "$dir/killed" 2>&1)"; code=$?
printf '%s\n--- exit status %s\n' "$out" "$code"
check "sync: exit 0" test "$code" -eq 0
check "the run's record is complete, as run 1's" \
  "$python" "$here/check_mlflow.py" "$uri" "$dir/killed" --keys-like "$dir/up"
out="$("$wxtrain" sync "$dir/killed" 2>&1)"; code=$?
check "a second sync has nothing to send" grep -q "nothing to send" <<<"$out"

echo "=== 3. --resume continues the same MLflow run"
out="$(train --set train.out_dir="$dir/resumed" --stop-after 4)"; code=$?
printf '%s\n--- exit status %s\n' "$out" "$code"
check "stopped at step 4: exit 0" test "$code" -eq 0
id_before="$("$python" -c "import json; print(json.load(open('$dir/resumed/mlflow/state.json'))['run_id'])")"
out="$(train --set train.out_dir="$dir/resumed" --resume)"; code=$?
printf '%s\n--- exit status %s\n' "$out" "$code"
check "resumed to step 8: exit 0" test "$code" -eq 0
check "the same MLflow run" grep -q "MLflow: run $id_before at" <<<"$out"
check "steps 1-8 in that run once each, equal to metrics.csv" \
  "$python" "$here/check_mlflow.py" "$uri" "$dir/resumed" --keys-like "$dir/up"

echo "=== 4. an HTTP error names the server and the status"
cp -r "$dir/up" "$dir/unknown_run"
"$python" -c "
import json; p = '$dir/unknown_run/mlflow/state.json'; s = json.load(open(p))
s.update(run_id='0123456789abcdef0123456789abcdef', sent=0); json.dump(s, open(p, 'w'))"
out="$("$wxtrain" sync "$dir/unknown_run" 2>&1)"; code=$?
printf '%s\n--- exit status %s\n' "$out" "$code"
check "exit status 1" test "$code" -eq 1
check "the message names the server, the request and HTTP 404" \
  grep -qE "^error: MLflow at $uri answered HTTP 404 to POST /api/2.0/mlflow/runs/log-batch: RESOURCE_DOES_NOT_EXIST" <<<"$out"

stop_server
[ "$fail" -eq 0 ] && echo "PASS" || echo "FAILED"
exit "$fail"
