#!/usr/bin/env bash
# Peak resident memory of `wxtrain forecast` for 8 and 64 steps of the same model, NetCDF and Zarr,
# side by side in one run (GNU time's "Maximum resident set size"): a forecast written step by step
# must not grow with its length by as much as one step's states.
#   bench/run_forecast_memory.sh WXTRAIN [WXTRAIN_BEFORE] [WORK]
# WXTRAIN_BEFORE (optional) is another build's binary measured the same way (the one that kept
# every step in memory). The data: 10 six-hourly states of 4 variables on a 361 x 720 (0.5 degree)
# global grid, written by xarray; one step's states are 4 x 361 x 720 float32 = 4.16 MB (3.97 MiB).
# A 16/32-channel U-Net trained for one step gives the checkpoint (its weights do not matter here).
set -euo pipefail
wxtrain="$1"
before="${2:-}"
work="${3:-/tmp/wxtrain_forecast_memory}"
python=/usr/bin/python3
rm -rf "$work"
mkdir -p "$work"
"$python" - "$work/data.nc" <<'PY'
import sys
import numpy as np
import pandas as pd
import xarray as xr
T, H, W = 10, 361, 720
lat = np.linspace(90, -90, H)
lon = np.arange(W) * 0.5
rng = np.random.default_rng(0)
hours = np.arange(T) * 6.0
wave = np.cos(np.deg2rad(lat))[None, :, None] * np.sin(np.deg2rad(lon)[None, None, :] + 2 * np.pi * hours[:, None, None] / 24)
data = {name: (("time", "lat", "lon"), (base + scale * wave + rng.normal(0, 0.1, (T, H, W))).astype(np.float32), {"units": units})
        for name, base, scale, units in [("t2m", 285.0, 5.0, "K"), ("u10", 0.0, 4.0, "m s**-1"),
                                         ("v10", 0.0, 3.0, "m s**-1"), ("msl", 101000.0, 800.0, "Pa")]}
xr.Dataset(data, coords={"time": pd.date_range("2020-01-01", periods=T, freq="6H"), "lat": lat, "lon": lon}).to_netcdf(sys.argv[1])
PY
cat >"$work/run.toml" <<TOML
[model]
name = "unet"
channels = [16, 32]
groups = 8
[data]
history = 2
time_step = "6h"
val_fraction = 0.3
[[data.sources]]
file = "$work/data.nc"
variable = "t2m"
[[data.sources]]
file = "$work/data.nc"
variable = "u10"
[[data.sources]]
file = "$work/data.nc"
variable = "v10"
[[data.sources]]
file = "$work/data.nc"
variable = "msl"
[train]
batch_size = 1
precision = "fp32"
steps = 1
warmup_steps = 0
val_every = 0
checkpoint_every = 1
out_dir = "$work/run"
TOML
"$wxtrain" train -q -c "$work/run.toml" >"$work/train.log" 2>&1 || { cat "$work/train.log"; exit 1; }

peak_kib() {  # peak_kib BINARY STEPS OUTPUT: the forecast's maximum resident set size in KiB
  rm -rf "$3"
  /usr/bin/time -v "$1" forecast --checkpoint "$work/run/checkpoint.pt" -o "$3" --steps "$2" --start 1 \
    >"$work/forecast.log" 2>"$work/time.log" || { cat "$work/forecast.log" "$work/time.log"; exit 1; }
  sed -n 's/.*Maximum resident set size (kbytes): //p' "$work/time.log"
}
step_kib=$((4 * 361 * 720 * 4 / 1024))
echo "one step's states: 4 x 361 x 720 float32 = $step_kib KiB"
printf '%-10s %-6s %12s %12s %14s\n' binary format "8 steps KiB" "64 steps KiB" "64 - 8 KiB"
for side in after before; do
  binary="$wxtrain"
  [ $side = before ] && binary="$before"
  [ -n "$binary" ] || continue
  for format in nc zarr; do
    eight=$(peak_kib "$binary" 8 "$work/f8.$format")
    sixty_four=$(peak_kib "$binary" 64 "$work/f64.$format")
    printf '%-10s %-6s %12d %12d %14d\n' $side $format "$eight" "$sixty_four" $((sixty_four - eight))
  done
done
