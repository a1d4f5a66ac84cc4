#!/usr/bin/env bash
# The main job on a fresh Debian machine: install, build, estimate the storm U-Net's memory, then
# train it on the real January 1996 blizzard data and forecast with the trained model.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh
config=${1:-configs/storm_unet.toml}
./build/cli/wxtrain info
./build/cli/wxtrain estimate --config "$config" --gpu RTX4090
