#!/usr/bin/env bash
# Where AIFS's training step spends its time, one process against each rank of two bands (issue 26):
# bench/aifs_step_parts on the run file of bench/run_model_parallel_bench.sh (AIFS on the storm
# data, num_channels LATENT, window 64, 4 processor layers, micro-batch 4, rollout 2, fp32, one
# thread per rank), once in one process and once under `mpirun -np 2` with
# distributed.model_parallel = 2. Prints each run's table: per part (encoder, processor attention,
# MLP, the halo exchanges, decoder) the forward and backward milliseconds per step, and per rank
# the hidden nodes, window keys and edges it computes. Run it on a quiet machine: these are timings.
#
#   bench/run_aifs_parts_bench.sh [BUILD_DIR] [STEPS] [LATENT] [HIDDEN_GRID] [--set key=value ...]
#
# BUILD_DIR (default build) holds bench/aifs_step_parts; STEPS timed steps (10) after 3 warm-up
# steps; HIDDEN_GRID o16 by default. Trailing --set arguments go to both runs. AIFS_PARTS_BIN=PATH
# runs another build of aifs_step_parts (the one before a change, for an A/B on the same machine).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
steps=${2:-10}
latent=${3:-64}
hidden=${4:-o16}
shift $(($# < 4 ? $# : 4))
bin=${AIFS_PARTS_BIN:-$build/bench/aifs_step_parts}  # another build of it: an A/B on the same machine
work="$build/bench/aifs_parts"
export OMP_NUM_THREADS=1
mkdir -p "$work"
bench/model_parallel_run_file.sh "$work/aifs.toml" aifs "$latent" 1 "$hidden"
args=(--config "$work/aifs.toml" --batch 4 --warmup 3 --steps "$steps" --set data.rollout_steps=2 "$@")
echo "== one process"
"$bin" "${args[@]}"
echo "== two bands (mpirun -np 2, distributed.model_parallel = 2)"
mpirun -np 2 --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1 "$bin" "${args[@]}" \
  --set distributed.model_parallel=2
