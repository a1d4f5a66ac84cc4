#!/bin/bash
# forecast_setup.sh WXTRAIN PYTHON DIR — the fixture of the forecast tests: the files of
# forecast_fixture.py (a land-masked sst, NaN without _FillValue, initial conditions of another
# date and three bad ones), DIR/train.toml on masked.nc, and a short `wxtrain train` of it whose
# output goes to DIR/train.log and whose checkpoint is DIR/run/checkpoint.pt.
set -eu
wxtrain="$1"
python="$2"
dir="$3"
here="$(cd "$(dirname "$0")" && pwd)"
rm -rf "$dir"
mkdir -p "$dir"
"$python" "$here/forecast_fixture.py" "$dir" >"$dir/fixture.log" 2>&1 || { cat "$dir/fixture.log"; exit 1; }

config() {  # config FILE SECOND_VARIABLE OUT_DIR
  cat <<TOML
[model]
name = "unet"
channels = [16, 32]
groups = 8
[data]
history = 2
time_step = "6h"
train_period = ["2020-01-01", "2020-01-07T18:00"]
val_period = ["2020-01-08", "2020-01-10T18:00"]
[[data.sources]]
file = "$dir/$1"
variable = "t2m"
[[data.sources]]
file = "$dir/$1"
variable = "$2"
[train]
batch_size = 4
precision = "fp32"
steps = 6
warmup_steps = 1
log_every = 3
val_every = 6
checkpoint_every = 6
out_dir = "$dir/$3"
TOML
}
config masked.nc sst run >"$dir/train.toml"
config nan_nofill.nc swh run_nofill >"$dir/train_nofill.toml"
if ! "$wxtrain" train -c "$dir/train.toml" >"$dir/train.log" 2>&1; then
  cat "$dir/train.log"; echo "FAIL: train on masked.nc"; exit 1
fi
cat "$dir/train.log"
