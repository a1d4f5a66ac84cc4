#!/bin/bash
# fault_suite.sh [WXTRAIN] [TABLE.md] — what a user sees when a training run meets the faults of a
# real cluster, and what survives each. Runs `wxtrain train` on the storm data (Debian's
# libncarg-data) and, one after another:
#   - kill -9 at random moments of training (10 times) and while checkpoint.pt is being written
#     (10 times), in one run folder: after every kill the last checkpoint must load and --resume
#     continue from it; at the end metrics.csv holds every step exactly once;
#   - a full disk (a small tmpfs; skipped without root) while a checkpoint is written;
#   - a data file removed, and one truncated, while the run goes on;
#   - under `mpirun -np 2`: SIGTERM to one rank, SIGTERM and SIGUSR1 to mpirun, kill -9 of one rank.
# Prints a Markdown table (fault, what the user sees, exit code, what survived, PASS/FAIL) and
# writes it to TABLE.md when given; exits 1 if any row fails. About 2-3 minutes on 2 cores.
# WXTRAIN defaults to build/cli/wxtrain; CTest runs it with the label `faults`.
set -u
here="$(cd "$(dirname "$0")/.." && pwd)"
wxtrain="$(realpath "${1:-$here/build/cli/wxtrain}")"
table_out="${2:-}"
[ -x "$wxtrain" ] || { echo "fault_suite: no wxtrain binary at $wxtrain (build it, or pass its path)"; exit 2; }
storm=/usr/share/ncarg/data/cdf
[ -r "$storm/Tstorm.cdf" ] || { echo "fault_suite: needs the storm data in $storm (apt install libncarg-data)"; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
work="$(mktemp -d /tmp/wxtrain_faults.XXXXXX)"
mnt="$work/tmpfs"
cleanup() {
  umount "$mnt" 2>/dev/null
  for p in $(jobs -p); do kill -9 "$p" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
RANDOM=${FAULT_SEED:-$$}

rows=()
failures=0
# row FAULT SEES EXIT SURVIVED VERDICT
row() {
  rows+=("| $1 | $2 | $3 | $4 | $5 |")
  [ "$5" = PASS ] || [ "$5" = SKIP ] || failures=$((failures + 1))
  echo "[$5] $1 -- $2 (exit $3); $4" >&2
}
now_ms() { date +%s%3N; }
# The last "error: ..." line of a log, for the table.
error_line() { grep -E "^error: " "$1" | tail -1 | sed "s|$work|<dir>|g"; }
# Lines in a CSV after its header.
rows_in() { [ -f "$1" ] && tail -n +2 "$1" | wc -l || echo 0; }
# metrics.csv holds steps 1..N, each once, and nothing else.
steps_once() {
  local n
  n=$(rows_in "$1")
  [ "$n" -gt 0 ] && [ "$(cut -d, -f1 "$1" | tail -n +2 | tr '\n' ' ')" = "$(seq -s ' ' 1 "$n") " ]
}
# wait_for COMMAND... — up to 60 s, polling every 20 ms.
wait_for() {
  local deadline=$(($(now_ms) + 60000))
  until "$@"; do
    [ "$(now_ms)" -lt "$deadline" ] || return 1
    sleep 0.02
  done
}
started() { grep -q "effective batch" "$1" 2>/dev/null; }  # printed just before the first step

# The run: a small U-Net on a copy of the storm data (so files can be removed and truncated).
mkdir -p "$work/data"
cp "$storm"/{P,T,U,V,U500,V500}storm.cdf "$work/data/"
cat >"$work/run.toml" <<TOML
[model]
name = "unet"
channels = [16, 32]
groups = 4
[data]
history = 2
rollout_steps = 1
val_fraction = 0.2
$(for v in P:p T:t U:u V:v U500:u500 V500:v500; do
    f=${v%%:*} n=${v##*:}
    printf '[[data.sources]]\nfile = "%s"\nvariable = "%s"\nname = "%s"\n' "$work/data/${f}storm.cdf" "${n%500}" "$n"
  done)
[train]
batch_size = 4
lr = 2e-3
warmup_steps = 1
steps = 100000
checkpoint_every = 1
val_every = 1000000
log_every = 1000000
TOML
train() { "$wxtrain" train -q -c "$work/run.toml" "$@"; }
# train_bg LOG ARGS... — in the background with $! the pid of wxtrain itself (a function run with &
# would be a subshell, and a signal to it would miss wxtrain).
train_bg() {
  local log="$1"; shift
  "$wxtrain" train -q -c "$work/run.toml" "$@" >"$log" 2>&1 &
  bg_pid=$!
}

# ---- kill -9, 20 times, in one run folder --------------------------------------------------------
kill_run="$work/kill9"
resumed_at=()
kill_fail=""
tmp_seen=0
for i in $(seq 1 20); do
  log="$work/kill9_$i.log"
  if [ -e "$kill_run/checkpoint.pt" ]; then mode=--resume; else mode=--overwrite; fi
  train_bg "$log" --set train.out_dir="$kill_run" $mode
  pid=$bg_pid
  if ! wait_for started "$log"; then kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
    kill_fail="run $i did not start: $(error_line "$log")"; break; fi
  if [ "$mode" = --resume ]; then
    at=$(sed -nE 's/.*resuming at step ([0-9]+).*/\1/p' "$log")
    [ -n "$at" ] || { kill_fail="run $i: no 'resuming at step' line"; kill -9 $pid; wait $pid 2>/dev/null; break; }
    resumed_at+=("$at")
  fi
  if [ $((i % 2)) = 1 ]; then
    # Training: a random moment 0.1-1.5 s into the steps.
    sleep "$(printf '0.%03d' $((100 + RANDOM % 900)))"
    [ $((RANDOM % 3)) = 0 ] && sleep 0.5
  else
    # Checkpoint writing: as soon as checkpoint.pt.tmp exists, after 0-9 ms more.
    wait_for test -e "$kill_run/checkpoint.pt.tmp" || true
    sleep "0.00$((RANDOM % 10))"
  fi
  kill -9 $pid 2>/dev/null
  wait $pid 2>/dev/null
  code=$?
  [ -e "$kill_run/checkpoint.pt.tmp" ] && tmp_seen=$((tmp_seen + 1))
  [ "$code" = 137 ] || { kill_fail="run $i exited $code before the kill: $(error_line "$log")"; break; }
done
if [ -z "$kill_fail" ]; then
  # The last checkpoint loads and the run continues to its end.
  last=$(sed -nE 's/.*resuming at step ([0-9]+).*/\1/p' "$work/kill9_20.log")
  final="$work/kill9_final.log"
  train --set train.out_dir="$kill_run" --resume --set train.steps=1000000 --stop-after 2 >"$final" 2>&1
  code=$?
  at=$(sed -nE 's/.*resuming at step ([0-9]+).*/\1/p' "$final")
  if [ "$code" != 0 ] || [ -z "$at" ]; then
    kill_fail="the final --resume failed (exit $code): $(error_line "$final")"
  elif ! steps_once "$kill_run/metrics.csv"; then
    kill_fail="metrics.csv does not hold each step once"
  else
    prev=0
    for s in "${resumed_at[@]}" "$at"; do
      [ "$s" -ge "$prev" ] || kill_fail="the resumed step went back from $prev to $s"
      prev=$s
    done
  fi
fi
if [ -z "$kill_fail" ]; then
  row "kill -9 at random moments: 10 in training steps, 10 while checkpoint.pt is written ($tmp_seen of the 20 left checkpoint.pt.tmp behind)" \
    "the process disappears (no message: SIGKILL cannot be caught)" "137" \
    "every time checkpoint.pt loaded and --resume continued (at steps ${resumed_at[*]} $at); metrics.csv holds each step once" PASS
else
  row "kill -9 at random moments of training and of checkpoint writing (20 times)" "$kill_fail" "-" "-" FAIL
fi

# ---- a full disk while a checkpoint is written ---------------------------------------------------
mkdir -p "$mnt"
if mount -t tmpfs -o size=64k tmpfs "$mnt" 2>/dev/null; then
  umount "$mnt"
  size_run="$work/sizing"
  train --set train.out_dir="$size_run" --set train.steps=1 >/dev/null 2>&1
  ckpt=$(stat -c %s "$size_run/checkpoint.pt" 2>/dev/null || echo 0)
  mount -t tmpfs -o size=$((ckpt + ckpt / 2 + 65536)) tmpfs "$mnt"
  log="$work/enospc.log"
  train --set train.out_dir="$mnt/run" --set train.steps=4 --set train.checkpoint_every=2 >"$log" 2>&1
  code=$?
  seen="$(error_line "$log")"
  mount -o remount,size=$((4 * ckpt + 1048576)) "$mnt"
  train --set train.out_dir="$mnt/run" --set train.steps=4 --set train.checkpoint_every=2 --resume >"$log.resume" 2>&1
  rcode=$?
  if [ "$code" = 1 ] && grep -q "No space left on device" <<<"$seen" && [ ! -e "$mnt/run/checkpoint.pt.tmp" ] &&
     [ "$rcode" = 0 ] && grep -q "resuming at step 2" "$log.resume"; then
    row "disk full (tmpfs) while checkpoint.pt is written" "\`${seen//|/\\|}\`" 1 \
      "checkpoint.pt of step 2, whole; no .tmp left; --resume after freeing space finished the run" PASS
  else
    row "disk full (tmpfs) while checkpoint.pt is written" "\`${seen//|/\\|}\`" "$code" "resume exit $rcode" FAIL
  fi
  umount "$mnt"
else
  row "disk full (tmpfs) while checkpoint.pt is written" "not run: cannot mount a tmpfs (needs root)" "-" "-" SKIP
fi

# ---- data files removed or truncated while the run goes on ---------------------------------------
# The storm data (6 x 300 KB) is read whole when the run starts (data/dataset.h preloads up to
# 256 MiB, and no run-file key lowers that), so a file changed later is not read again by this
# run; the next run that opens it (a --resume, forecast) reports it.
data_fault() {  # data_fault NAME ACTION
  local name="$1" action="$2" dir="$work/data_$1" log="$work/data_$1.log"
  cp "$storm/Tstorm.cdf" "$work/data/Tstorm.cdf"
  train_bg "$log" --set train.out_dir="$dir" --overwrite
  local pid=$bg_pid
  wait_for started "$log"
  sleep 0.5
  case "$action" in
    remove) rm -f "$work/data/Tstorm.cdf" ;;
    truncate) truncate -s 150000 "$work/data/Tstorm.cdf" ;;
  esac
  sleep 1
  kill -TERM $pid
  wait $pid
  local code=$?
  local steps; steps=$(rows_in "$dir/metrics.csv")
  train --set train.out_dir="$dir" --resume --stop-after 1 >"$log.resume" 2>&1
  local rcode=$?
  local seen; seen="$(error_line "$log.resume")"
  if [ "$code" = 0 ] && grep -q "stopped at step" "$log" && [ "$rcode" = 1 ] && grep -q "Tstorm.cdf" <<<"$seen"; then
    row "data file $2d while training runs" \
      "nothing: the run reads its data at start and goes on (stopped here with SIGTERM after $steps steps, exit 0); the next --resume: \`${seen//|/\\|}\`" \
      "0, then 1" "checkpoint.pt and metrics.csv of the stop" PASS
  else
    row "data file $2d while training runs" "run exit $code; resume exit $rcode: ${seen//|/\\|}" "$code, $rcode" "-" FAIL
  fi
}
data_fault removed remove
data_fault truncated truncate
cp "$storm/Tstorm.cdf" "$work/data/Tstorm.cdf"

# ---- under mpirun -np 2 ----------------------------------------------------------------------------
mpirun_train() {  # mpirun_train DIR LOG — starts the job in the background; sets job_pid
  mpirun -np 2 --oversubscribe --allow-run-as-root -x OMP_NUM_THREADS=1 \
    "$wxtrain" train -q -c "$work/run.toml" --set train.out_dir="$1" --overwrite >"$2" 2>&1 &
  job_pid=$!
}
ranks_of() { pgrep -P "$1" -f "wxtrain train" | sort -n; }
# mpi_fault NAME TARGET(rank1|mpirun) SIGNAL EXPECTED_EXIT
mpi_fault() {
  local name="$1" target="$2" signal="$3" expected="$4" dir="$work/mpi_$2_$3" log="$work/mpi_$2_$3.log"
  mpirun_train "$dir" "$log"
  if ! wait_for started "$log"; then row "$name" "the job did not start: $(error_line "$log")" - - FAIL; kill -9 $job_pid; return; fi
  sleep 1
  local pid=$job_pid
  [ "$target" = rank1 ] && pid=$(ranks_of $job_pid | tail -1)
  local t0; t0=$(now_ms)
  kill -"$signal" "$pid"
  local waited=0
  while kill -0 $job_pid 2>/dev/null && [ $waited -lt 600 ]; do sleep 0.1; waited=$((waited + 1)); done
  if kill -0 $job_pid 2>/dev/null; then
    kill -9 $job_pid; wait $job_pid 2>/dev/null
    row "$name" "the job hung for 60 s" - - FAIL
    return
  fi
  wait $job_pid
  local code=$?
  local seconds; seconds=$(awk "BEGIN { printf \"%.1f\", ($(now_ms) - $t0) / 1000 }")
  local steps; steps=$(rows_in "$dir/metrics.csv")
  local seen
  if grep -q "stopped at step" "$log"; then
    seen="\`$(grep -m1 "stopped at step" "$log" | sed "s|$work|<dir>|g")\`"
  else
    seen="\`$(grep -m1 -E "noticed that process rank|error: " "$log" | sed "s|$work|<dir>|g" | cut -c1-110)\`"
  fi
  # What survived: the checkpoint loads and a one-process --resume goes on from it.
  local rlog="$log.resume" survived verdict=PASS
  if train --set train.out_dir="$dir" --resume --stop-after 1 >"$rlog" 2>&1; then
    local at; at=$(sed -nE 's/.*resuming at step ([0-9]+).*/\1/p' "$rlog")
    survived="checkpoint.pt of step $at (--resume continued on 1 rank); metrics.csv $steps rows"
    [ "$signal" = KILL ] || [ "$at" = "$steps" ] || { survived="$survived (steps after the checkpoint lost)"; verdict=FAIL; }
  else
    survived="no loadable checkpoint: $(error_line "$rlog")"
    verdict=FAIL
  fi
  [ "$code" = "$expected" ] || verdict=FAIL
  row "$name" "$seen, ended ${seconds} s after the signal" "$code" "$survived" $verdict
}
mpi_fault "SIGTERM to one rank (mpirun -np 2)" rank1 TERM 0
mpi_fault "SIGUSR1 to mpirun (forwarded to the ranks)" mpirun USR1 0
mpi_fault "SIGTERM to mpirun" mpirun TERM 1
mpi_fault "kill -9 of one rank under mpirun" rank1 KILL 137

# ---- the table -------------------------------------------------------------------------------------
table="| fault | what the user sees | exit code | what survived | result |
|---|---|---|---|---|"
for r in "${rows[@]}"; do table+=$'\n'"$r"; done
printf '%s\n' "$table"
[ -n "$table_out" ] && printf '%s\n' "$table" >"$table_out"
[ "$failures" = 0 ]
