#!/bin/bash
# forecast_initial_file.sh WXTRAIN PYTHON DIR — `forecast --initial FILE --start DATE` takes its
# initial conditions from another file of the same variables (initial.nc, written by xarray: the
# training data's states 20..25 dated 2021-03-01): the forecast equals the one from the same
# states in the training data, value for value, and carries CF forecast_reference_time and a
# lead_time coordinate (a timedelta in xarray) for both NetCDF and Zarr. Initial conditions that do
# not fit (a variable missing, another grid, a date absent, a gap in the history) are refused with a
# message naming the file and what is wrong. DIR is forecast_setup.sh's.
set -u
wxtrain="$1"
python="$2"
dir="$3"
checks="$(cd "$(dirname "$0")" && pwd)/forecast_checks.py"
ckpt="$dir/run/checkpoint.pt"
fail=0

rm -rf "$dir/from_archive.nc" "$dir/from_initial.nc" "$dir/from_initial.zarr"
"$wxtrain" forecast --checkpoint "$ckpt" -o "$dir/from_archive.nc" --steps 3 --start 2020-01-06T06:00 \
  || { echo "FAIL: forecast from the archive"; fail=1; }
"$python" "$checks" reference "$dir/from_archive.nc" 2020-01-06T06:00 3 6 || fail=1
for out in from_initial.nc from_initial.zarr; do
  if ! log="$("$wxtrain" forecast --checkpoint "$ckpt" --initial "$dir/initial.nc" --start 2021-03-01T06:00 \
               -o "$dir/$out" --steps 3 2>&1)"; then
    printf '%s\n' "$log"; echo "FAIL: forecast --initial to $out"; fail=1; continue
  fi
  printf '%s\n' "$log"
  grep -q "from 2021-03-01T06:00:00 in $dir/initial.nc" <<<"$log" || { echo "FAIL: forecast line"; fail=1; }
  "$python" "$checks" reference "$dir/$out" 2021-03-01T06:00 3 6 || fail=1
  # The same initial states give the same forecast, whichever file they come from.
  "$python" "$checks" same "$dir/$out" "$dir/from_archive.nc" || fail=1
done
# Without --start: from the file's last state.
"$wxtrain" forecast --checkpoint "$ckpt" --initial "$dir/initial.nc" -o "$dir/from_last.nc" --steps 2 \
  && "$python" "$checks" reference "$dir/from_last.nc" 2021-03-02T06:00 2 6 || { echo "FAIL: --initial without --start"; fail=1; }

expect() {  # expect REGEX ARGS...: exit non-zero with REGEX in the output, and no output file
  local regex="$1"; shift
  rm -f "$dir/refused.nc"
  local out status
  out="$("$wxtrain" forecast --checkpoint "$ckpt" -o "$dir/refused.nc" --steps 2 "$@" 2>&1)"; status=$?
  if [ $status -eq 0 ] || [ $status -gt 2 ] || ! grep -qE -- "$regex" <<<"$out" || [ -e "$dir/refused.nc" ]; then
    echo "FAIL: forecast $* exited $status; expected 1 or 2 and /$regex/, got: $out"; fail=1
  else
    echo "refused as expected: $out"
  fi
}
expect "--initial $dir/initial_no_sst.nc: variable 'sst' not found in $dir/initial_no_sst.nc" \
  --initial "$dir/initial_no_sst.nc" --start 2021-03-01T06:00
expect "--initial $dir/initial_coarse.nc: its grid is 8 x 16 \(lat 75 .. -65, lon 0 .. 337.5\) but the model was trained on 16 x 32 \(lat 75 .. -75, lon 0 .. 348.75\)" \
  --initial "$dir/initial_coarse.nc" --start 2021-03-01T06:00
expect "--start 2021-03-04T00:00: $dir/initial.nc has no state at that time \(it has 6 state\(s\), 2021-03-01T00:00:00 .. 2021-03-02T06:00:00\)" \
  --initial "$dir/initial.nc" --start 2021-03-04T00:00
expect "--start 2021-03-01T18:00:00: the model needs 2 initial states 6h apart up to it, but $dir/initial_gap.nc has no state at 2021-03-01T12:00:00" \
  --initial "$dir/initial_gap.nc" --start 2021-03-01T18:00
expect "--initial $dir/absent.nc: .*absent.nc" --initial "$dir/absent.nc"
exit $fail
