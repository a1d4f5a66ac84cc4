#!/bin/bash
# archives_train.sh WXTRAIN PYTHON DIR — `wxtrain train` on the ERA5-shaped fixture as each tool
# writes it (tests/data/era5_fixture.py: Zarr with Blosc, Zarr with Zstd per-step chunks, Zarr v3
# sharded, NetCDF,
# GRIB2), with pressure levels and a 6-hour step on hourly data, sst as an input-only forcing, the
# land-sea mask as a static field and three computed forcings; the first line counts the samples
# the archive's gap removed; then `wxtrain forecast` to NetCDF and to Zarr, which xarray opens with
# levels and CF time (tests/data/check_forecast_structure in the python below).
set -eu
wxtrain="$1"
python="$2"
dir="$3"
here="$(cd "$(dirname "$0")/.." && pwd)"
rm -rf "$dir"
mkdir -p "$dir"
"$python" "$here/data/era5_fixture.py" "$dir" >"$dir/fixture.log" 2>&1 || { cat "$dir/fixture.log"; exit 1; }

config() {  # config STORE T2M_VARIABLE SST_FILE
  cat <<TOML
[model]
name = "unet"
channels = [16, 32]
groups = 8
[data]
history = 2
rollout_steps = 1
time_step = "6h"
train_period = ["2020-01-01", "2020-01-04"]
val_period = ["2020-01-05", "2020-01-05T18:00"]
prefetch = 2
forcings = ["insolation", "cos_local_time", "sin_local_time"]
[[data.static]]
file = "$dir/era5.nc"
variable = "lsm"
[[data.sources]]
file = "$dir/$3"
variable = "sst"
role = "forcing"
[[data.sources]]
file = "$dir/$1"
variable = "z"
levels = [500, 850]
[[data.sources]]
file = "$dir/$1"
variable = "t"
levels = [850]
[[data.sources]]
file = "$dir/$1"
variable = "$2"
name = "t2m"
[train]
batch_size = 4
precision = "fp32"
steps = 4
warmup_steps = 1
log_every = 2
val_every = 4
checkpoint_every = 4
out_dir = "$dir/run_${1//./_}"
TOML
}

fail=0
for store in era5.zarr era5_zstd.zarr era5_v3.zarr era5.nc era5.grib2; do
  t2m=t2m sst_file="$store"
  [ "$store" = era5.grib2 ] && t2m=2t sst_file=era5.nc  # the GRIB file holds no sst
  config "$store" "$t2m" "$sst_file" >"$dir/$store.toml"
  echo "=== $store"
  if ! output="$("$wxtrain" train -c "$dir/$store.toml" 2>&1)"; then
    printf '%s\n' "$output"; echo "FAIL: train on $store"; fail=1; continue
  fi
  printf '%s\n' "$output"
  first="$(head -n 1 <<<"$output")"
  # 96 hours of training period every 6h minus the missing hour 54: windows (42,48,60), (48,60,66) skipped.
  grep -qE "^data: 5 channels \(4 prognostic, 1 forcing\) \+ 1 static \+ 3 computed forcings on 19 x 36 .*, 19 states 2020-01-01T00:00:00 .. 2020-01-05T18:00:00 every 6h \(of 119 every 1h\). samples: 11 training \(2 skipped" <<<"$first" \
    || { echo "FAIL: first line of train on $store: $first"; fail=1; }
  grep -qE "validation at step 4" <<<"$output" || { echo "FAIL: no validation on $store"; fail=1; }
done

# Forecasts from the NetCDF run, both formats, opened by xarray.
run="$dir/run_era5_nc"
for out in forecast.nc forecast.zarr; do
  # From 00 UTC on the last day: sst, a forcing read from the archive, exists for the three steps.
  "$wxtrain" forecast --checkpoint "$run/checkpoint.pt" -o "$dir/$out" --steps 3 --start 2020-01-05T00:00 \
    || { echo "FAIL: forecast $out"; fail=1; continue; }
  "$python" - "$dir/$out" <<'PY' || fail=1
import sys
import numpy as np
import pandas as pd
import xarray as xr
path = sys.argv[1]
ds = xr.open_zarr(path) if path.endswith(".zarr") else xr.open_dataset(path)
print(ds)
assert ds["z"].dims == ("time", "level", "lat", "lon"), ds["z"].dims
assert list(ds["level"].values) == [500, 850], ds["level"].values
assert ds["t"].shape[1] == 1 and ds["t2m"].dims == ("time", "lat", "lon")
times = pd.to_datetime(ds["time"].values)
want = pd.date_range("2020-01-05T06:00", periods=3, freq="6H")
assert (times == want).all(), (times, want)
assert np.isfinite(ds["z"].values).all() and 2e4 < float(ds["z"].mean()) < 1e5, float(ds["z"].mean())
assert float(ds["lat"][0]) == 90.0
# Inputs are not forecasts: the forcing, the static field and the computed forcings are absent.
for name in ("sst", "lsm", "insolation", "cos_local_time", "sin_local_time"):
    assert name not in ds.variables, (name, list(ds.variables))
print("OK", path)
PY
done
# From the last state the archive has no sst for the first step: refused, naming what is missing.
if out="$("$wxtrain" forecast --checkpoint "$run/checkpoint.pt" -o "$dir/beyond.nc" --steps 2 2>&1)"; then
  echo "FAIL: a forecast past the archive's file forcings was accepted"; fail=1
fi
grep -q "the forcings read from files need the archive's states up to the last step, but it ends at 2020-01-05T18:00:00" <<<"$out" \
  || { echo "FAIL: beyond-archive message: $out"; fail=1; }
# --start by date; a window across the archive's gap (06:00 on Jan 3 is missing) is refused.
if out="$("$wxtrain" forecast --checkpoint "$run/checkpoint.pt" -o "$dir/gap.nc" --steps 2 --start 2020-01-03T12:00 2>&1)"; then
  echo "FAIL: a forecast from a window across the gap was accepted"; fail=1
fi
grep -q "jumps from 2020-01-03T00:00:00 to 2020-01-03T12:00:00" <<<"$out" || { echo "FAIL: gap message: $out"; fail=1; }
out="$("$wxtrain" forecast --checkpoint "$run/checkpoint.pt" -o "$dir/dated.nc" --steps 2 --start 2020-01-04T00:00 2>&1)" \
  || { echo "FAIL: forecast --start 2020-01-04T00:00: $out"; fail=1; }
grep -q "from 2020-01-04T00:00:00" <<<"$out" || { echo "FAIL: forecast start line: $out"; fail=1; }
exit $fail
