#!/bin/sh
# A FourCastNet trained by wxtrain, exported, and used from the .mdlus:
#   1. wxtrain train (storm_afno.toml, 4 steps), wxtrain forecast from its checkpoint;
#   2. wxtrain export -> model.mdlus + global_means.npy + global_stds.npy;
#   3. wxtrain forecast --checkpoint model.mdlus --config storm_afno.toml gives the same forecast;
#   4. wxtrain import model.mdlus writes the run-file lines, and a fine-tune starts from the .mdlus;
#   5. with REFERENCE_PYTHON set (run_reference_tests.sh, label `reference`): PhysicsNeMo's
#      Module.from_checkpoint loads model.mdlus and, normalising with the statistics beside it as
#      Earth2Studio does, steps wxtrain's forecast on: state k gives state k + 1.
#   export_roundtrip.sh WXTRAIN SYSTEM_PYTHON SOURCE_DIR WORK_DIR
set -e
wxtrain=$1
python=$2
src=$3
work=$4
here=$src/tests/interop
config=$here/storm_afno.toml
rm -rf "$work"
mkdir -p "$work"
cd "$work"
"$wxtrain" train -c "$config" --set train.out_dir=run > train.log 2>&1 || { cat train.log; exit 1; }
"$wxtrain" forecast --checkpoint run/checkpoint.pt --steps 3 --start 40 -o wxtrain.nc
"$wxtrain" export --checkpoint run/checkpoint.pt -o export/model.mdlus
for f in export/model.mdlus export/global_means.npy export/global_stds.npy; do
  [ -s "$f" ] || { echo "FAIL: export wrote no $f"; exit 1; }
done
"$wxtrain" forecast --checkpoint export/model.mdlus -c "$config" --steps 3 --start 40 -o from_mdlus.nc 2> forecast_mdlus.log ||
  { cat forecast_mdlus.log; exit 1; }
grep -q "PhysicsNeMo .mdlus (zip) of physicsnemo.models.afno.afno.AFNO" forecast_mdlus.log ||
  { echo "FAIL: forecast did not say what it loaded"; cat forecast_mdlus.log; exit 1; }
"$python" - wxtrain.nc from_mdlus.nc <<'PY'
import sys
import numpy as np
import xarray as xr
a, b = xr.open_dataset(sys.argv[1]), xr.open_dataset(sys.argv[2])
for name in ("p", "t", "u", "v"):
    x, y = a[name].values, b[name].values
    # Cells missing in every training state are NaN (the fill value) in both forecasts.
    assert x.shape == y.shape and (np.isnan(x) == np.isnan(y)).all(), (name, x.shape, y.shape)
    err = np.nanmax(np.abs(x - y)) / np.nanmax(np.abs(x))
    assert err < 1e-6, (name, err)
print("forecast from the exported .mdlus equals the checkpoint's: p, t, u, v over 3 steps")
PY
"$wxtrain" import export/model.mdlus -o imported.toml 2> import.log || { cat import.log; exit 1; }
for line in 'name = "fourcastnet"' 'spectral_modes = "reference"' 'prediction = "state"' "init_from = \"$work/export/model.mdlus\""; do
  grep -qF "$line" imported.toml || { echo "FAIL: imported.toml lacks: $line"; cat imported.toml; exit 1; }
done
"$wxtrain" train -c "$config" --set train.out_dir=finetune --set train.steps=1 \
  --set "train.init_from=\"export/model.mdlus\"" > finetune.log 2>&1 || { cat finetune.log; exit 1; }
grep -q "init_from [^ ]*export/model.mdlus: PhysicsNeMo .mdlus" finetune.log || { echo "FAIL: no init_from report"; cat finetune.log; exit 1; }
grep -q "tensors: 28 loaded" finetune.log || { echo "FAIL: not every tensor loaded"; cat finetune.log; exit 1; }
# What does not fit is refused by name, exit 2, never a crash.
expect="$src/tests/cli/expect.sh"
"$expect" 2 "predicts the next state, but the run has train.prediction = .tendency." -- \
  "$wxtrain" train -c "$config" --set train.out_dir=refused1 --set train.prediction=tendency \
  --set "train.init_from=\"export/model.mdlus\"" || { echo "FAIL: tendency run from a .mdlus"; exit 1; }
"$expect" 2 "args.json builds another network than the run's \[model\]: model.embed_dim = 32 \(the file\) but 64 \(the run\)" -- \
  "$wxtrain" train -c "$config" --set train.out_dir=refused2 --set model.embed_dim=64 \
  --set "train.init_from=\"export/model.mdlus\"" || { echo "FAIL: another [model] from a .mdlus"; exit 1; }
"$expect" 2 "carries no run file: give --config run.toml" -- \
  "$wxtrain" forecast --checkpoint export/model.mdlus --steps 1 -o x.nc || { echo "FAIL: forecast without --config"; exit 1; }
"$wxtrain" train -c "$config" --set train.out_dir=tendency --set train.prediction=tendency --set train.steps=1 \
  > tendency.log 2>&1 || { cat tendency.log; exit 1; }
"$expect" 2 "trained with train.prediction = .tendency.* Fine-tune with train.prediction = .state. to export" -- \
  "$wxtrain" export --checkpoint tendency/checkpoint.pt -o refused/model.mdlus || { echo "FAIL: export of a tendency model"; exit 1; }
echo "export -> forecast, import and init_from from the .mdlus: ok; mismatches refused by name"
if [ -n "$REFERENCE_PYTHON" ]; then
  "$python" "$here/forecast_to_npy.py" wxtrain.nc export/model.mdlus wxtrain.npy
  "$REFERENCE_PYTHON" "$here/check_export.py" export/model.mdlus wxtrain.npy
fi
