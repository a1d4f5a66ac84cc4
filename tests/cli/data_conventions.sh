#!/bin/bash
# data_conventions.sh WXTRAIN PYTHON DIR — training and forecasting on files as users' tools write
# them (DIR holds tests/cli/make_convention_data.py's files and run files; issue 28):
#   - latitudes and longitudes as 1-D variables on dimensions without coordinate variables are
#     found as CF finds them: the start line shows them, scores are latitude-weighted, the
#     forecast carries them, data.region crops by them and computed forcings use them;
#   - a file with no latitudes says so at the start, scores unweighted, and data.region or
#     data.forcings are refused naming the file;
#   - NetCDF-4 string attributes (time units and calendar, units) are read like char ones;
#   - monthly data ("months since", 360_day and standard) trains with time_step = "1mo" (the
#     default for monthly states), "3mo" picks every third month, day-of-year forcings included.
set -eu
wxtrain="$1"
python="$2"
dir="$3"
cd "$dir"
fail=0
check() {  # check DESCRIPTION COMMAND...
  if "${@:2}"; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi
}
train() {  # train NAME: the run's output, and a failure when it does not finish
  local out
  if ! out="$("$wxtrain" train -q -c "$1.toml" --overwrite 2>&1)"; then
    printf '%s\n' "$out" >&2
    echo "FAIL: train $1" >&2
    return 1
  fi
  printf '%s\n' "$out"
}

# --- latitudes as 1-D variables on dimensions without coordinate variables
out="$(train latlon_1d)" || exit 1
printf '%s\n' "$out" | head -n 3
check "the start line shows the file's latitudes and longitudes, not indices" \
  grep -qE "on 16 x 20 \(lat 60\.\.30, lon 230\.\.268\)" <<<"$out"
check "validation scores are latitude-weighted" grep -q "latitude-weighted RMSE" <<<"$out"
"$wxtrain" forecast --checkpoint runs/latlon_1d/checkpoint.pt --steps 2 -o latlon_1d_forecast.nc >/dev/null
check "the forecast's lat and lon are the file's degrees" "$python" -c "
import netCDF4, numpy as np
with netCDF4.Dataset('latlon_1d_forecast.nc') as nc:
    assert np.allclose(nc['lat'][:], np.arange(60.0, 29.0, -2.0)), nc['lat'][:]
    assert np.allclose(nc['lon'][:], np.arange(230.0, 270.0, 2.0)), nc['lon'][:]
"
out="$(train latlon_1d_region)" || exit 1
check "data.region crops by the found coordinates" grep -qE "on 6 x 6 \(lat 50\.\.40, lon 240\.\.250\)" <<<"$out"
out="$(train latlon_1d_zarr)" || exit 1
check "Zarr from xarray: the coordinates named by the coordinates attribute" \
  grep -qE "on 16 x 20 \(lat 60\.\.30, lon 230\.\.268\)" <<<"$out"

# --- no latitudes at all: said at the start, never weighted by indices taken for degrees
out="$(train no_grid)" || exit 1
printf '%s\n' "$out" | head -n 1
check "the start line says the grid has no latitudes, naming the file" \
  grep -qE "grid points without latitudes and longitudes \(variable 't' in .*no_grid\.nc \(time=40, y=16, x=20\) has no latitudes" <<<"$out"
check "validation scores say they are unweighted" grep -q "unweighted (the grid has no latitudes) RMSE" <<<"$out"
check "no latitude shows as degrees" test "$(grep -c "lat 0\.\.15" <<<"$out")" -eq 0
for run in no_grid_region no_grid_forcings; do
  if out="$("$wxtrain" train -q -c $run.toml --overwrite 2>&1)"; then
    echo "FAIL: $run trained on grid indices"; fail=1
  else
    check "$run: refused, naming the file and what is missing" \
      grep -qE "error: data\.(region|forcings) needs latitudes and longitudes, but variable 't' in .*no_grid\.nc .* has no latitudes" <<<"$out"
  fi
done

# --- NetCDF-4 string attributes
out="$(train strings)" || exit 1
check "string time units and calendar: dated in the noleap calendar" \
  grep -qE "20 states 2000-02-27T00:00:00 \.\. 2000-03-08T12:00:00 every 12h \(of 40 every 6h\)" <<<"$out"
"$wxtrain" forecast --checkpoint runs/strings/checkpoint.pt --steps 1 -o strings_forecast.nc >/dev/null
check "string units reach the forecast" "$python" -c "
import netCDF4
with netCDF4.Dataset('strings_forecast.nc') as nc:
    assert nc['t'].units == 'K', nc['t'].ncattrs()
    assert nc['u'].units == 'm s-1'
    assert nc['time'].calendar == 'noleap', nc['time'].calendar
"

# --- monthly data
out="$(train monthly_std)" || exit 1
printf '%s\n' "$out" | head -n 1
check "standard calendar: 48 months with time_step = 1mo, no window skipped" \
  grep -qE "48 states 1990-01-01T00:00:00 \.\. 1993-12-01T00:00:00 every 1mo; samples: 34 training, 10 validation$" <<<"$out"
out="$(train monthly_std_default_step)" || exit 1
check "monthly states step in months without data.time_step" \
  grep -qE "48 states 1990-01-01T00:00:00 \.\. 1993-12-01T00:00:00 every 1mo; samples: 34 training" <<<"$out"
out="$(train monthly_360)" || exit 1
check "360_day calendar: 48 months of 30 days" \
  grep -qE "48 states 1990-01-01T00:00:00 \.\. 1993-12-01T00:00:00 every 30d; samples: 34 training, 10 validation$" <<<"$out"
out="$(train monthly_std_quarterly)" || exit 1
check "3mo: every third month" \
  grep -qE "16 states 1990-01-01T00:00:00 \.\. 1993-10-01T00:00:00 every 3mo \(of 48 every 1mo\)" <<<"$out"
exit $fail
