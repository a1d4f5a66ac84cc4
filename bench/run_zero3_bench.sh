#!/bin/bash
# ZeRO-3 against ZeRO-0 under mpirun -np 2 (bench/zero3_step.cpp): step time, bytes all-gathered and
# reduce-scattered per step, and the per-rank peak against the estimator, for each run file given
# (default: the storm U-Net, ViT and GraphCast). The two stages alternate repetition by repetition
# inside one job, so both see the same machine; run it on a quiet one.
#
#   bench/run_zero3_bench.sh [BUILD_DIR=build] [CONFIG ...]
#   env: PRECISION (fp32) BATCH (4 per rank) THREADS (1 per rank) REPS (3) STEPS (5)
# Needs the target zero3_step built in BUILD_DIR.
set -eu
cd "$(dirname "$0")/.."
build="${1:-build}"
shift || true
configs=("$@")
[ ${#configs[@]} -gt 0 ] || configs=(configs/storm_unet.toml configs/storm_vit.toml configs/storm_graphcast.toml)
threads="${THREADS:-1}"
mpirun_cmd=(mpirun -np 2 --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS="$threads")
field() { grep -o " $1=[^ ]*" | head -1 | cut -d= -f2; }

echo "| model | params | stage | step (ms) | gathered / step | reduce-scattered / step | per-rank peak | estimate | error |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for config in "${configs[@]}"; do
  out=$("${mpirun_cmd[@]}" "$build/bench/zero3_step" --config "$config" --precision "${PRECISION:-fp32}" \
        --batch "${BATCH:-4}" --reps "${REPS:-3}" --steps "${STEPS:-5}")
  while read -r line; do
    mib() { awk -v b="$1" 'BEGIN {printf "%.2f MiB", b / 1048576}'; }
    printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n" "$(field model <<<" $line")" "$(field params <<<" $line")" \
      "$(field zero_stage <<<" $line")" "$(field step_ms <<<" $line")" \
      "$(mib "$(field allgather_bytes_per_step <<<" $line")")" "$(mib "$(field reduce_scatter_bytes_per_step <<<" $line")")" \
      "$(mib "$(field peak_bytes <<<" $line")")" "$(mib "$(field estimated_bytes <<<" $line")")" \
      "$(field estimate_error <<<" $line")"
  done <<<"$(grep '^zero_stage=' <<<"$out")"
done
