#!/usr/bin/env bash
# Issue 24's benchmark: a 4-member U-Net ensemble trained on the afCRPS against the same U-Net
# trained deterministically on the MSE, on the storm data (configs/storm_unet.toml) and on the
# ERA5-shaped fixture (tests/data/era5_fixture.py). Both models of a dataset have the same
# architecture, seed, batch (samples per step), steps and learning-rate schedule; the ensemble runs
# each sample through 4 members with 4 noise channels (so 4x the model evaluations per step), on the
# fair CRPS (crps_alpha = 1). The storm's ensemble keeps a member's noise for its whole rollout
# (train.noise_correlation = 1): its errors grow about linearly with lead, and independent noise
# grows the spread only as the square root of the lead (docs/ensembles.md); the fixture's errors
# are the fixture's own white noise, which does not accumulate, so its noise is redrawn every step
# (noise_correlation = 0; with 1 it is over-dispersive by lead 3, docs/benchmarks.md). Every
# run validates once, at its last step, over 4 leads; the MSE model's CRPS is its MAE (the `mae`
# column of a deterministic validation.csv), scored by the same code, latitude weights and samples
# as the ensemble's fair CRPS.
#
#   bench/run_ensemble_bench.sh [BUILD_DIR] [OUT]
#
# BUILD_DIR (default build) holds cli/wxtrain; OUT (default bench/results/ensemble_crps_<date>)
# gets each run's validation.csv and log (<dataset>_<mse|ens>.*) and the tables (tables.md). The
# runs themselves (checkpoints) go to BUILD_DIR/bench/ensemble_crps. Single-threaded
# (OMP_NUM_THREADS=1), fp32; a few minutes of CPU in all.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
out=${2:-bench/results/ensemble_crps_$(date -u +%F)}
wxtrain="$build/cli/wxtrain"
work="$build/bench/ensemble_crps"
python=/usr/bin/python3
export OMP_NUM_THREADS=1
rm -rf "$work"
mkdir -p "$work" "$out"

# The settings both models of a dataset share (the ensemble adds train.ensemble_members = 4).
# Storm: 51 training states of 33 x 36 (6 variables), 13 for validation.
storm_common=(--set 'model.channels=[16, 32]' --set model.groups=8 --set train.precision='"fp32"'
              --set train.steps=300 --set train.warmup_steps=20 --set train.lr=2e-3 --set train.batch_size=8
              --set train.val_every=300 --set train.checkpoint_every=300 --set train.log_every=50
              --set train.val_lead_steps=4 --set train.seed=0)
# Fixture: 19 x 36 global grid at 10 degrees, z and t on 3 levels, t2m, hourly over 5 days. Hourly
# steps (time_step = "1h"): trained on 2020-01-01T00..01-04T11 (79 samples), validated on
# 01-04T12..01-05T23 (31 samples of 4 leads, 1-4 h). At the 6-hourly step of the fixture's own run
# files there are 7 training samples and 3 validation samples: the U-Net learns the 7 samples'
# noise by heart, and its ensemble then has next to no spread in t (spread/skill 0.2-0.4; SECTION.md).
fixture_common=(--set 'model.channels=[16, 32]' --set model.groups=8 --set train.precision='"fp32"'
                --set train.steps=300 --set train.warmup_steps=20 --set train.lr=2e-3 --set train.batch_size=4
                --set train.val_every=300 --set train.checkpoint_every=300 --set train.log_every=50
                --set train.val_lead_steps=4 --set train.seed=0)
ensemble=(--set train.ensemble_members=4 --set train.noise_channels=4 --set train.noise_std=1.0
          --set train.crps_alpha=1.0)

"$python" tests/data/era5_fixture.py "$work/era5_fixture" >"$work/fixture.log" 2>&1 || { cat "$work/fixture.log"; exit 1; }
cat >"$work/era5_fixture_unet.toml" <<EOF
[model]
name = "unet"
channels = [16, 32]
groups = 8

[data]
history = 2
rollout_steps = 1
time_step = "1h"
train_period = ["2020-01-01", "2020-01-04T11:00"]
val_period = ["2020-01-04T12:00", "2020-01-05T23:00"]
forcings = ["insolation", "cos_local_time", "sin_local_time"]

[[data.static]]
file = "$PWD/$work/era5_fixture/era5.nc"
variable = "lsm"

[[data.sources]]
file = "$PWD/$work/era5_fixture/era5.zarr"
variable = "z"
levels = [1000, 850, 500]

[[data.sources]]
file = "$PWD/$work/era5_fixture/era5.zarr"
variable = "t"
levels = [1000, 850, 500]

[[data.sources]]
file = "$PWD/$work/era5_fixture/era5.zarr"
variable = "t2m"

[train]
optimizer = "adamw"
weight_decay = 0.01
grad_clip = 1.0
EOF

run() {  # run NAME CONFIG ARGS...
  local name=$1 config=$2
  shift 2
  echo "=== $name"
  local start=$SECONDS
  "$wxtrain" train -c "$config" --set "train.out_dir=\"$work/$name\"" "$@" >"$out/$name.log" 2>&1 ||
    { tail -20 "$out/$name.log"; echo "FAIL: $name"; exit 1; }
  cp "$work/$name/validation.csv" "$out/$name.validation.csv"
  echo "  $((SECONDS - start)) s"
  echo "$name $((SECONDS - start))" >>"$out/seconds.txt"
}

rm -f "$out/seconds.txt"
run storm_mse configs/storm_unet.toml "${storm_common[@]}"
run storm_ens configs/storm_unet.toml "${storm_common[@]}" "${ensemble[@]}" --set train.noise_correlation=1.0
run fixture_mse "$work/era5_fixture_unet.toml" "${fixture_common[@]}"
run fixture_ens "$work/era5_fixture_unet.toml" "${fixture_common[@]}" "${ensemble[@]}" --set train.noise_correlation=0.0

{
  "$python" bench/study/ensemble_table.py "Storm (January 1996, 33 x 36, 6 variables)" \
    "$out/storm_mse.validation.csv" "$out/storm_ens.validation.csv"
  "$python" bench/study/ensemble_table.py "ERA5-shaped fixture (19 x 36 global, z/t on 3 levels, t2m; hourly steps)" \
    "$out/fixture_mse.validation.csv" "$out/fixture_ens.validation.csv"
} >"$out/tables.md"
cat "$out/tables.md"
