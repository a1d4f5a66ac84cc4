#!/usr/bin/env bash
# How long `wxtrain estimate --analytic` takes on GraphCast at 0.25 degrees (the graphcast-0.25
# preset: 721 x 1440 on M6) with a 12-step rollout, fp32, checkpointed per block, at
# distributed.model_parallel = 1, 2 and 4: the graph is built once (cached with its edge lists) and
# every P the GPUs-per-model table asks for (up to 64) costs one partition of it
# (models/graphcast/graphcast_memory.cpp, docs/estimator.md "GPUs per model"). Then with --gpu H200
# (the table asks for P = 1 and 2 only) and --memory 1000GiB (no table): the cost of the table apart.
# Prints the wall seconds of each run and the estimate's own "method ... s" (the estimate without
# the table). A timing: run it on a quiet machine.
#
#   bench/time_graphcast_estimate.sh [BUILD_DIR]
#
# BUILD_DIR (default build) holds cli/wxtrain; the run file goes to BUILD_DIR/bench/graphcast_estimate.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
wxtrain="$(pwd)/$build/cli/wxtrain"
work="$build/bench/graphcast_estimate"
mkdir -p "$work"
run="$work/gc.toml"
printf '[model]\npreset = "graphcast-0.25"\n[train]\nbatch_size = 1\ncheckpointing = true\n[data]\nrollout_steps = 12\n' > "$run"
printf '%-34s %10s %22s\n' case "wall s" "estimate (no table) s"
time_one() {  # time_one LABEL ARGS...: wall seconds of one estimate, and the seconds it reports itself
  local label="$1"
  shift
  local start end out
  start=$(date +%s.%N)
  out="$("$wxtrain" estimate --config "$run" --analytic "$@" 2>&1 || true)"
  end=$(date +%s.%N)
  printf '%-34s %10.2f %22s\n' "$label" "$(awk -v a="$start" -v b="$end" 'BEGIN {print b - a}')" \
    "$(sed -n 's/^method .*, \([0-9.]*\) s$/\1/p' <<<"$out")"
}
for p in 1 2 4; do
  time_one "model_parallel=$p, catalog" --set "distributed.model_parallel=$p"
done
time_one "model_parallel=1, --gpu H200" --gpu H200
time_one "model_parallel=4, --memory 1000GiB" --set distributed.model_parallel=4 --memory 1000GiB
