#!/usr/bin/env bash
# Writes the seed corpus of run_file_fuzz (fuzz/corpus/run_file_fuzz/): every run file in configs/,
# and a few with --set overrides after a NUL byte (the target's input format: run file, NUL, one
# override per line).
#   fuzz/make_seeds_run_file.sh
set -euo pipefail
cd "$(dirname "$0")"
out=corpus/run_file_fuzz
mkdir -p "$out"
for config in ../configs/*.toml; do
  cp "$config" "$out/$(basename "$config")"
done
printf '%s\0%s\n%s\n' "$(cat ../configs/storm_unet.toml)" 'model.channels=[8,16]' 'train.steps=1' >"$out/storm_unet_set.toml"
printf '%s\0%s\n%s\n%s\n' "$(cat ../configs/storm_vit.toml)" 'train.precision=bf16-mixed' 'train.batch_size="auto"' \
  'memory.limit="8GiB"' >"$out/storm_vit_set.toml"
printf '%s\0%s\n%s\n' "$(cat ../configs/era5_unet.toml)" 'data.train_period=["2000-01-01", "2000-12-31"]' \
  'distributed.zero_stage=2' >"$out/era5_unet_set.toml"
ls -l "$out"
