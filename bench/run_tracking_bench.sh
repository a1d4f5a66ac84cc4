#!/bin/bash
# Step throughput with tracking on against off, side by side: the same `wxtrain train` run of the
# storm U-Net (real steps, the real loader) without [tracking], and with an MLflow server up on
# 127.0.0.1 and TensorBoard event files on. The two alternate round by round on the same machine;
# a round's figure is the median of its per-step samples/s in metrics.csv past the first 5 steps
# (the steps' own timing, without start-up or checkpoints; the step that starts an epoch also holds
# the epoch's validation, an outlier the median discounts), and the verdict is the median of the
# on/off ratios. Raw files go to OUT.
#
#   bench/run_tracking_bench.sh [BUILD_DIR=build] [ROUNDS=5] [OUT=bench/results/tracking_<date>]
#   env: CONFIG (configs/storm_unet.toml) STEPS (60) PY (.venv-tracking/bin/python, with mlflow:
#        scripts/install_tracking_test_deps.sh)
set -eu
cd "$(dirname "$0")/.."
build="${1:-build}"
rounds="${2:-5}"
out="${3:-bench/results/tracking_$(date -u +%F)}"
config="${CONFIG:-configs/storm_unet.toml}"
steps="${STEPS:-60}"
py="${PY:-.venv-tracking/bin/python}"
mkdir -p "$out"
tmp="$(mktemp -d)"
port="$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
uri="http://127.0.0.1:$port"
setsid "$(dirname "$py")/mlflow" server --host 127.0.0.1 --port "$port" --workers 1 \
  --backend-store-uri "sqlite:///$tmp/mlflow.db" --artifacts-destination "$tmp/artifacts" >"$tmp/server.log" 2>&1 &
server=$!
trap 'kill -KILL -- "-$server" 2>/dev/null; rm -rf "$tmp"' EXIT
until "$py" -c "import urllib.request; urllib.request.urlopen('$uri/health', timeout=1)" 2>/dev/null; do
  kill -0 "$server" || { echo "mlflow server did not start"; exit 1; }
  sleep 0.5
done
# The server answers /health before it has finished starting: for 20-30 s after, its processes
# still burn a core (measured: 13 s of CPU in the 20 s after /health first answered, 0.6 s during a
# 25-step run once settled), which would land on the first rounds' steps. Wait until the whole
# process group uses under 5% of a core over 2 s (at most 120 s).
server_ticks() { for p in $(pgrep -g "$server"); do awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null; done | awk '{s += $1} END {print s + 0}'; }
for _ in $(seq 60); do
  before=$(server_ticks); sleep 2; after=$(server_ticks)
  [ $((after - before)) -lt 10 ] && break
done

median() { sort -g | awk '{v[NR]=$1} END {if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }
step_rate() { tail -n +7 "$1/metrics.csv" | cut -d, -f7 | median; }  # samples_per_s past step 5
common=(train -q -c "$config" --set train.steps="$steps" --set train.checkpoint_every=0 --set train.val_every=0
        --set train.val_lead_steps=1 --overwrite)
echo "config $config, $steps steps, $rounds rounds; MLflow at $uri (SQLite) and TensorBoard for 'on'" | tee "$out/summary.txt"
for r in $(seq "$rounds"); do
  "$build/cli/wxtrain" "${common[@]}" --set train.out_dir="$tmp/off" >"$out/off_$r.log" 2>&1
  cp "$tmp/off/metrics.csv" "$out/off_$r.metrics.csv"
  "$build/cli/wxtrain" "${common[@]}" --set train.out_dir="$tmp/on" --set tracking.mlflow_uri="$uri" \
    --set tracking.tensorboard=true --set tracking.experiment=bench >"$out/on_$r.log" 2>&1
  cp "$tmp/on/metrics.csv" "$out/on_$r.metrics.csv"
  off=$(step_rate "$tmp/off"); on=$(step_rate "$tmp/on")
  echo "$on $off" | awk -v r="$r" '{printf "round %d: off %.2f samples/s, on %.2f samples/s, on/off %.3f\n", r, $2, $1, $1/$2}' | tee -a "$out/summary.txt"
  echo "$on $off" | awk '{print $1/$2}' >>"$tmp/ratios"
done
echo "median on/off: $(median <"$tmp/ratios") (ratios $(sort -g "$tmp/ratios" | tr '\n' ' '))" | tee -a "$out/summary.txt"
