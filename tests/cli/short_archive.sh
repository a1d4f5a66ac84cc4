#!/bin/bash
# short_archive.sh WXTRAIN PYTHON DIR — what a first-time user meets with a short archive of their
# own (12 six-hourly states of t and u on an 8 x 12 grid, written by netCDF4-python), kept in a
# project folder beside its run file, which names the data by a relative path:
#  - the run file works from any directory: `train` started elsewhere reads data/short.nc next to
#    the run file, run.toml records the absolute path, and `forecast` from a third directory finds
#    the data through the checkpoint;
#  - the default data.val_fraction leaves no validation sample (2 trailing states, a sample needs
#    3): said at the start with what to change; the same split asked for explicitly is an error
#    (exit 2);
#  - train.batch_size = "auto" and `tune-batch --write` stop at the 8 training samples, and say
#    that the data, not memory, decided.
set -u
wxtrain="$1"
python="$2"
dir="$3"
rm -rf "$dir"
mkdir -p "$dir/project/data" "$dir/elsewhere" "$dir/third"
fail=0
check() {  # check DESCRIPTION COMMAND...
  if "${@:2}"; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi
}

"$python" - "$dir/project/data/short.nc" <<'EOF' || { echo "FAIL: could not write the fixture"; exit 1; }
import sys
import netCDF4
import numpy as np

with netCDF4.Dataset(sys.argv[1], "w", format="NETCDF4") as nc:
    nc.createDimension("time", None)
    nc.createDimension("lat", 8)
    nc.createDimension("lon", 12)
    time = nc.createVariable("time", "f8", ("time",))
    time.units = "hours since 2000-01-01 00:00:00"
    time.calendar = "standard"
    time[:] = np.arange(12) * 6.0
    lat = nc.createVariable("lat", "f4", ("lat",))
    lat.units = "degrees_north"
    lat[:] = np.linspace(30, 65, 8)
    lon = nc.createVariable("lon", "f4", ("lon",))
    lon.units = "degrees_east"
    lon[:] = np.linspace(0, 55, 12)
    rng = np.random.default_rng(0)
    y, x = np.meshgrid(np.arange(8), np.arange(12), indexing="ij")
    for name, units, base in (("t", "K", 270.0), ("u", "m s-1", 5.0)):
        v = nc.createVariable(name, "f4", ("time", "lat", "lon"))
        v.units = units
        v[:] = np.stack([base + 5 * np.sin((x + k) / 3.0) + 3 * np.cos(y / 2.0) + rng.normal(0, 0.1, (8, 12))
                         for k in range(12)])
EOF

cat >"$dir/project/run.toml" <<EOF
[model]
name = "unet"
channels = [8, 16]
groups = 4

[data]
history = 2
rollout_steps = 1
prefetch = 0

[[data.sources]]
file = "data/short.nc"   # next to this run file
variable = "t"

[[data.sources]]
file = "data/short.nc"
variable = "u"

[train]
batch_size = 2
steps = 2
lr = 1e-3
log_every = 1000
checkpoint_every = 0
out_dir = "$dir/runs/short"
EOF

echo "=== train from another directory, default val_fraction"
out="$(cd "$dir/elsewhere" && "$wxtrain" train -q -c ../project/run.toml 2>&1)"
code=$?
printf '%s\n' "$out"
check "train from another directory exits 0" test "$code" -eq 0
check "the data next to the run file was read" test -s "$dir/runs/short/checkpoint.pt"
check "no validation sample is said at the start, with what to change" grep -qE \
  "warning: no validation: the trailing data.val_fraction = 0.2 \(the default\) of the 12 states holds 2, but a validation sample needs 3 .*raise data.val_fraction \(0.25 holds 3 states\)" <<<"$out"
check "no validation.csv" test ! -e "$dir/runs/short/validation.csv"
check "run.toml records the data's absolute path" grep -qF "file = \"$dir/project/data/short.nc\"" "$dir/runs/short/run.toml"

echo "=== forecast from a third directory"
out="$(cd "$dir/third" && "$wxtrain" forecast --checkpoint ../runs/short/checkpoint.pt -o forecast.nc --steps 2 2>&1)"
code=$?
printf '%s\n' "$out"
check "forecast from a third directory exits 0" test "$code" -eq 0
check "the forecast is written" test -s "$dir/third/forecast.nc"

echo "=== the same split asked for explicitly"
out="$(cd "$dir/elsewhere" && "$wxtrain" train -q -c ../project/run.toml --set data.val_fraction=0.2 \
  --set "train.out_dir=\"$dir/runs/asked\"" 2>&1)"
code=$?
printf '%s\n' "$out"
check "asked-for validation without a sample exits 2" test "$code" -eq 2
check "the error names what the split holds and what a sample needs" grep -qE \
  "error: .*run.toml: the run asks for validation but gets no validation sample: the trailing data.val_fraction = 0.2 of the 12 states holds 2, but a validation sample needs 3" <<<"$out"
check "nothing was trained" test ! -e "$dir/runs/asked/checkpoint.pt"

echo "=== batch_size = \"auto\" over an 8-sample training split"
out="$(cd "$dir/elsewhere" && "$wxtrain" train -q -c ../project/run.toml --set 'train.batch_size="auto"' \
  --set "train.out_dir=\"$dir/runs/auto\"" 2>&1)"
code=$?
printf '%s\n' "$out"
check "auto batch trains (exit 0)" test "$code" -eq 0
check "the tuned batch is the split's 8 samples" grep -qF 'train.batch_size = "auto": tuned micro-batch 8 ' <<<"$out"
check "the data, not memory, decided" grep -qE \
  "micro-batch 8 is the most the training split fills \(8 sample\(s\) per rank on 1 rank\(s\)\): the data, not memory, capped the search" <<<"$out"

echo "=== tune-batch --write"
cp "$dir/project/run.toml" "$dir/project/tune.toml"
out="$(cd "$dir/elsewhere" && "$wxtrain" tune-batch -c ../project/tune.toml --write 2>&1)"
code=$?
printf '%s\n' "$out"
check "tune-batch exits 0" test "$code" -eq 0
check "tune-batch says the data decided" grep -qF "the data, not memory, capped the search" <<<"$out"
check "tune-batch --write records 8" grep -qE "^batch_size = 8( |$)" "$dir/project/tune.toml"
exit $fail
