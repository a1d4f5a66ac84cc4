#!/usr/bin/env bash
# The main job on a fresh Debian machine: install, build, then on the real January 1996 blizzard
# data (Debian's libncarg-data): estimate the run's memory, train the storm U-Net, and forecast
# with the trained model.   Usage: scripts/demo.sh [configs/storm_<unet|vit|gnn>.toml]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh
config=${1:-configs/storm_unet.toml}
name=$(basename "$config" .toml)
wxtrain=./build/cli/wxtrain

$wxtrain info
echo; echo "== how much memory does this run need, and which GPUs fit it?"
mkdir -p runs
$wxtrain estimate --config "$config" --svg "runs/$name-memory.svg"
echo; echo "== training on the storm data (checkpoints, metrics.csv and validation.csv in runs/$name)"
$wxtrain train --config "$config"
echo; echo "== an 8-step (48 h) forecast from the last state"
$wxtrain forecast --checkpoint "runs/$name/checkpoint.pt" --steps 8 --output "runs/$name/forecast.nc"
