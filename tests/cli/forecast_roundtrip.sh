#!/bin/bash
# forecast_roundtrip.sh WXTRAIN DIR — a short `wxtrain train` on the storm data (DIR/good.toml from
# make_bad_data.sh), then `wxtrain forecast` from its checkpoint; the NetCDF file must exist and
# hold every variable over (time = steps, lat = 33, lon = 36), read back by ncdump.
set -eu
wxtrain="$1"
dir="$2"
out="$dir/forecast.nc"
rm -f "$out"
"$wxtrain" train -q -c "$dir/good.toml" --set train.out_dir="$dir/out_forecast"
"$wxtrain" forecast --checkpoint "$dir/out_forecast/checkpoint.pt" -o "$out" --steps 3
[ -s "$out" ] || { echo "FAIL: $out was not written"; exit 1; }
header="$(ncdump -h "$out")"
printf '%s\n' "$header"
fail=0
for v in p t u v u500 v500; do
  grep -qE "float $v\(time, lat, lon\)" <<<"$header" || { echo "FAIL: no variable $v(time, lat, lon)"; fail=1; }
done
grep -qE "time = (UNLIMITED ; // \(3 currently\)|3 ;)" <<<"$header" || { echo "FAIL: expected 3 forecast times"; fail=1; }
grep -qE "lat = 33 ;" <<<"$header" || { echo "FAIL: expected lat = 33"; fail=1; }
grep -qE "lon = 36 ;" <<<"$header" || { echo "FAIL: expected lon = 36"; fail=1; }
# The values are numbers, not all fill: a 6-hour forecast of surface pressure stays physical.
ncdump -v p "$out" | sed -n '/^ p =/,/;/p' | tr -s ' ,;' '\n' | grep -E '^-?[0-9]' | head -50 >"$dir/p_values.txt"
[ "$(wc -l <"$dir/p_values.txt")" -ge 50 ] || { echo "FAIL: could not read values of p"; fail=1; }
exit $fail
