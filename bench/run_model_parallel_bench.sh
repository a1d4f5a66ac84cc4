#!/usr/bin/env bash
# Issue 26's communication cost: a small gnn, GraphCast or AIFS on the storm data (configs/storm_gnn.toml's
# data) trained by one process on the whole grid and by `mpirun -np 2` with
# distributed.model_parallel = 2 (two latitude bands, halo exchanged before each message-passing
# layer), the same samples and steps. Prints each run's median samples/s (metrics.csv, steps after
# the first two) and their ratio, and the sharded run's header line with the bytes per halo
# exchange. Run it on a quiet machine: the ratio is a timing.
#
#   bench/run_model_parallel_bench.sh [BUILD_DIR] [STEPS] [LATENT] [MODEL] [HIDDEN_GRID]
#
# BUILD_DIR (default build) holds cli/wxtrain; runs go to BUILD_DIR/bench/model_parallel.
# MODEL: gnn (default), graphcast (M4, 4 processor layers, latent LATENT) or aifs (hidden grid
# HIDDEN_GRID, o16 by default, num_channels LATENT, 4 heads, window 64, 4 processor layers); the
# run file is bench/model_parallel_run_file.sh's.
# Single-threaded ranks (OMP_NUM_THREADS=1), fp32, micro-batch 4, rollout 2.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
steps=${2:-20}
latent=${3:-64}
model=${4:-gnn}
hidden=${5:-o16}
wxtrain=${WXTRAIN:-$build/cli/wxtrain}  # WXTRAIN=PATH: another build (the one before a change: an A/B)
work="$build/bench/model_parallel"
export OMP_NUM_THREADS=1
rm -rf "$work"
mkdir -p "$work"
bench/model_parallel_run_file.sh "$work/gnn.toml" "$model" "$latent" "$steps" "$hidden"
common=(train -c "$work/gnn.toml" --set data.rollout_steps=2)
"$wxtrain" "${common[@]}" --set train.out_dir="$work/whole" > "$work/whole.log" 2>&1
mpirun -np 2 --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1 "$wxtrain" "${common[@]}" \
  --set train.out_dir="$work/bands" --set distributed.model_parallel=2 > "$work/bands.log" 2>&1
median() {  # samples/s (7th column) of the steps after the first two
  tail -n +4 "$1/metrics.csv" | cut -d, -f7 | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}
whole=$(median "$work/whole")
bands=$(median "$work/bands")
grep "^model parallel:" "$work/bands.log"
echo "samples/s: one process $whole, two bands (the group) $bands; step time two bands / one process: $(awk -v a="$whole" -v b="$bands" 'BEGIN {printf "%.3f", a / b}')"
