#!/usr/bin/env bash
# Writes the seed corpus of checkpoint_fuzz (fuzz/corpus/checkpoint_fuzz/): a real checkpoint of the
# smallest storm U-Net from `wxtrain train` (one step; 22 KB, most of it the RNG state and weights)
# and three small ones in the same layout from make_checkpoint_seeds (fuzz/make_seeds_checkpoint.cpp).
#   fuzz/make_seeds_checkpoint.sh [BUILD_DIR] [FUZZ_BUILD_DIR]     (defaults build, build-fuzz)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
fuzz_build=${2:-build-fuzz}
out=fuzz/corpus/checkpoint_fuzz
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$build/cli/wxtrain" train -c configs/storm_unet.toml --set 'model.channels=[2]' --set model.groups=1 \
  --set train.steps=1 --set train.out_dir="$work/run" --overwrite >/dev/null 2>&1
cp "$work/run/checkpoint.pt" "$out/storm_unet_tiny.pt"
cmake --build "$fuzz_build" --target make_checkpoint_seeds >/dev/null
ASAN_OPTIONS=detect_leaks=0 "$fuzz_build/make_checkpoint_seeds" "$out"
ls -l "$out"
