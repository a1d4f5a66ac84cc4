#!/bin/bash
# forecast_streamed.sh WXTRAIN PYTHON DIR — forecasts are written step by step as they are
# produced: the NetCDF file's time is an unlimited dimension and the Zarr store has one chunk per
# step and variable, both holding the same values (xarray); while a long forecast runs, its
# temporary store gains step chunks; killed (-9) mid-way, it leaves the earlier forecast under the
# final name untouched. DIR is forecast_setup.sh's.
set -u
wxtrain="$1"
python="$2"
dir="$3"
checks="$(cd "$(dirname "$0")" && pwd)/forecast_checks.py"
ckpt="$dir/run/checkpoint.pt"
fail=0

rm -rf "$dir/stream.nc" "$dir/stream.zarr" "$dir"/.stream.*
for out in stream.nc stream.zarr; do
  "$wxtrain" forecast --checkpoint "$ckpt" -o "$dir/$out" --steps 5 --start 2020-01-06T06:00 \
    || { echo "FAIL: forecast $out"; fail=1; }
  "$python" "$checks" reference "$dir/$out" 2020-01-06T06:00 5 6 || fail=1
done
"$python" "$checks" same "$dir/stream.nc" "$dir/stream.zarr" || fail=1
ncdump -h "$dir/stream.nc" | grep -q "time = UNLIMITED ; // (5 currently)" \
  || { echo "FAIL: the NetCDF time dimension is not unlimited with 5 records"; ncdump -h "$dir/stream.nc"; fail=1; }
for v in t2m sst; do
  "$python" -c "import json,sys; z=json.load(open(sys.argv[1])); sys.exit(z['chunks'] != [1, 16, 32])" \
    "$dir/stream.zarr/$v/.zarray" || { echo "FAIL: $v is not chunked one step at a time"; fail=1; }
  [ "$(ls "$dir/stream.zarr/$v" | grep -c '^[0-9]')" = 5 ] || { echo "FAIL: $v has not 5 chunks"; fail=1; }
done

# A long forecast into the same names, watched and killed: steps reach the disk while it runs,
# and the kill leaves the earlier forecasts whole.
for out in stream.zarr stream.nc; do
  "$wxtrain" forecast --checkpoint "$ckpt" -o "$dir/$out" --steps 200000 --start 2020-01-06T06:00 >/dev/null 2>&1 &
  pid=$!
  temporary="$dir/.$out.tmp-$pid"
  first="" second=""
  for _ in $(seq 600); do  # up to 60 s for the model to load and the first steps to be written
    kill -0 $pid 2>/dev/null || break
    if [ "$out" = stream.zarr ]; then count="$(ls "$temporary/t2m" 2>/dev/null | grep -c '^[0-9]')"
    else count="$(stat -c %s "$temporary" 2>/dev/null || echo 0)"; fi
    if [ -z "$first" ] && [ "$count" -gt 0 ]; then first=$count; sleep 1; continue; fi
    if [ -n "$first" ]; then second=$count; break; fi
    sleep 0.1
  done
  running=0; kill -0 $pid 2>/dev/null && running=1
  kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
  echo "$out: temporary $temporary grew from $first to $second (chunks or bytes) in a second; still running: $running"
  if [ -z "$first" ] || [ -z "$second" ] || [ "$second" -le "$first" ] || [ $running = 0 ]; then
    echo "FAIL: $out: steps did not reach the disk while the forecast ran"; fail=1
  fi
  "$python" "$checks" steps "$dir/$out" 5 || { echo "FAIL: the kill damaged the earlier $out"; fail=1; }
  rm -rf "$temporary"
done
exit $fail
