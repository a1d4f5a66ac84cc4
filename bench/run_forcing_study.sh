#!/usr/bin/env bash
# The storm U-Net scored as WeatherBench reports it, with and without forcings and with a rollout
# curriculum: latitude-weighted RMSE and ACC by lead (6 h to 24 h) for each variable, against
# persistence and the climatology, averaged over seeds. What docs/benchmarks.md ("Forcings, static
# fields and the rollout curriculum on the storm data") shows.
#   bench/run_forcing_study.sh [BUILD_DIR] [SEEDS]
# Variants of configs/storm_unet.toml (120 steps, val_lead_steps = 4):
#   plain       no computed forcings, no static field
#   forcings    the config as it is: insolation, local time, position, the land-sea mask
#   curriculum  forcings + train.rollout_schedule = [[0, 1], [40, 2], [80, 4]]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
seeds=${2:-3}
out="$build/bench/forcing_study"
rm -rf "$out"
mkdir -p "$out"
base=configs/storm_unet.toml
# plain: the [[data.static]] table and the forcings line dropped; rollout_steps dropped for the
# schedule (a run file gives one or the other).
awk '/^\[\[data.static\]\]/{skip=1; next} /^\[/{skip=0} !skip && !/^forcings =/' "$base" >"$out/plain.toml"
cp "$base" "$out/forcings.toml"
grep -v '^rollout_steps' "$base" >"$out/curriculum.toml"
for seed in $(seq 0 $((seeds - 1))); do
  for variant in plain forcings curriculum; do
    extra=()
    [ "$variant" = curriculum ] && extra=(--set 'train.rollout_schedule=[[0, 1], [40, 2], [80, 4]]')
    echo "=== $variant, seed $seed"
    "$build/cli/wxtrain" train -q -c "$out/$variant.toml" --set train.seed=$seed \
      --set "train.out_dir=\"$out/$variant-$seed\"" "${extra[@]}" 2>&1 | grep -E "^(data:|loss weights|rollout|finished)"
  done
done
/usr/bin/python3 bench/study/summarize_scores.py "$out" plain forcings curriculum
