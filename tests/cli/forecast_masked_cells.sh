#!/bin/bash
# forecast_masked_cells.sh WXTRAIN PYTHON DIR — cells missing in every state (sst over a land
# block, _FillValue = -9999): train reports their share at its start, and the forecast writes NaN
# there (declared as CF _FillValue/missing_value), to NetCDF and to Zarr, while the other cells
# and variables hold numbers. NaN stored without any _FillValue (netCDF4-python, fill_value=False)
# is reported as missing too. DIR is forecast_setup.sh's.
set -u
wxtrain="$1"
python="$2"
dir="$3"
checks="$(cd "$(dirname "$0")" && pwd)/forecast_checks.py"
fail=0

grep -q "missing values (fill values or NaN) in the training data: sst 9.4% of cells in every state" "$dir/train.log" \
  || { echo "FAIL: train did not report sst's masked cells:"; cat "$dir/train.log"; fail=1; }
grep -q "t2m [0-9.]*% of cells" "$dir/train.log" && { echo "FAIL: t2m has no missing value but was reported"; fail=1; }

for out in masked_forecast.nc masked_forecast.zarr; do
  rm -rf "$dir/$out"
  if ! log="$("$wxtrain" forecast --checkpoint "$dir/run/checkpoint.pt" -o "$dir/$out" --steps 3 \
               --start 2020-01-06T06:00 2>&1)"; then
    printf '%s\n' "$log"; echo "FAIL: forecast $out"; fail=1; continue
  fi
  printf '%s\n' "$log"
  grep -q "forecast: NaN (the fill value) at the cells missing in every training state: sst 9.4% of cells" <<<"$log" \
    || { echo "FAIL: forecast did not report the masked cells"; fail=1; }
  "$python" "$checks" masked "$dir/$out" "$dir/land.txt" sst 3 || fail=1
done

# NaN without a _FillValue attribute: missing all the same, reported, and NaN in the forecast.
if ! log="$("$wxtrain" train -c "$dir/train_nofill.toml" 2>&1)"; then
  printf '%s\n' "$log"; echo "FAIL: train on nan_nofill.nc"; exit 1
fi
printf '%s\n' "$log"
grep -q "missing values (fill values or NaN) in the training data: swh 9.4% of cells in every state" <<<"$log" \
  || { echo "FAIL: NaN without _FillValue was not reported as missing"; fail=1; }
rm -f "$dir/nofill.nc"
"$wxtrain" forecast --checkpoint "$dir/run_nofill/checkpoint.pt" -o "$dir/nofill.nc" --steps 2 \
  && "$python" "$checks" masked "$dir/nofill.nc" "$dir/land.txt" swh 2 || { echo "FAIL: forecast of swh"; fail=1; }
exit $fail
