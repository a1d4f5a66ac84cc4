#!/bin/sh
# A PhysicsNeMo Pangu or GraphCastNet, file -> wxtrain -> file, as a user would go:
#   1. reference_fixture.py writes the data (the system Python); PhysicsNeMo builds the model at a
#      small size with fixed-seed random weights and writes it with its own Module.save
#      (make_reference_model.py);
#   2. wxtrain import writes the [model] and [train] lines; with the test's [data] section
#      (KIND_data.toml) in front they are the run file; Pangu's channels in another order than
#      PhysicsNeMo's (q before z) are refused by name, exit 2, by init_from and import --config;
#   3. wxtrain train from the .mdlus with lr = 0 (1 step: the weights as imported), and again with
#      lr = 1e-3 (3 steps); the init_from report loads every tensor;
#   4. wxtrain forecast from the fine-tuned checkpoint; wxtrain export of both checkpoints; the
#      forecast from the exported .mdlus (forecast --checkpoint model.mdlus) equals the checkpoint's;
#   5. PhysicsNeMo (check_reference_roundtrip.py): the lr = 0 export holds the original's tensors bit
#      for bit, and Module.from_checkpoint of the fine-tuned export steps wxtrain's forecast on.
# Run by run_reference_tests.sh (label `reference`), which sets REFERENCE_PYTHON.
#   mdlus_roundtrip.sh pangu|graphcast WXTRAIN SYSTEM_PYTHON SOURCE_DIR WORK_DIR
set -e
kind=$1
wxtrain=$2
python=$3
src=$4
here=$src/tests/interop
work=$5
[ -n "$REFERENCE_PYTHON" ] || { echo "mdlus_roundtrip.sh needs REFERENCE_PYTHON (run it through run_reference_tests.sh)"; exit 1; }
case $kind in
  pangu)
    args='{"img_size": [16, 32], "patch_size": [2, 2, 2], "embed_dim": 8, "num_heads": [1, 2, 2, 1], "window_size": [2, 4, 8]}'
    data="pangu.nc pangu_static.nc"
    tensors=247 ;;
  graphcast)
    args='{"mesh_level": 2, "input_res": [13, 24], "input_dim_grid_nodes": 3, "output_dim_grid_nodes": 2, "processor_layers": 4, "hidden_dim": 16, "hidden_layers": 1}'
    data="graphcast.nc"
    tensors=130 ;;
  *) echo "mdlus_roundtrip.sh: expected pangu or graphcast, got $kind"; exit 1 ;;
esac
rm -rf "$work"
mkdir -p "$work"
cd "$work"
"$python" "$here/reference_fixture.py" "$kind" .
# PhysicsNeMo's import warnings (no CUDA driver, torch.meshgrid) are left out of the test's output.
quiet() { grep -v "Warp CUDA\|UserWarning\|_VF.meshgrid" "$1" || true; }
"$REFERENCE_PYTHON" "$here/make_reference_model.py" "$kind" reference.mdlus "$args" > make.log 2>&1 || { cat make.log; exit 1; }
quiet make.log
"$wxtrain" import reference.mdlus -o imported.toml 2> import.log || { cat import.log; exit 1; }
for line in "name = \"$kind\"" 'prediction = "state"' "init_from = \"$work/reference.mdlus\""; do
  grep -qF "$line" imported.toml || { echo "FAIL: imported.toml lacks: $line"; cat imported.toml; exit 1; }
done
cat "$here/${kind}_data.toml" imported.toml > run.toml
if [ "$kind" = pangu ]; then
  # Its channels in a fixed order the file does not record: import says which, and a run file that
  # lists them otherwise (here q before z) is refused by name, exit 2, by import --config and init_from.
  grep -q "^# It reads them in a fixed order, which the file does not record: z, q, t, u, v (each on 1000, 925" imported.toml ||
    { echo "FAIL: import did not write Pangu's channel order"; cat imported.toml; exit 1; }
  sed 's/variable = "z"/variable = "Q"/; s/variable = "q"/variable = "z"/; s/variable = "Q"/variable = "q"/' run.toml > wrong_order.toml
  refusal="PhysicsNeMo's Pangu reads its channels in a fixed order, which its checkpoint does not record, and the run's channels are not in it: input 1 is q on 1000 hPa where it reads z on 1000 hPa"
  "$src/tests/cli/expect.sh" 2 "$refusal" -- "$wxtrain" train -c wrong_order.toml --set train.steps=1 --set train.out_dir=\"refused\" ||
    { echo "FAIL: init_from took the channels in another order"; exit 1; }
  "$src/tests/cli/expect.sh" 2 "wrong_order.toml: $refusal" -- "$wxtrain" import reference.mdlus --config wrong_order.toml ||
    { echo "FAIL: import --config took the channels in another order"; exit 1; }
  echo "channels in another order than Pangu's: refused by init_from and import --config (exit 2)"
fi
quick="--set train.batch_size=2 --set train.precision=\"fp32\" --set train.warmup_steps=0 --set train.val_lead_steps=1"
# shellcheck disable=SC2086
"$wxtrain" train -c run.toml $quick --set train.steps=1 --set train.lr=0 --set train.out_dir=\"untouched\" > untouched.log 2>&1 ||
  { cat untouched.log; exit 1; }
# shellcheck disable=SC2086
"$wxtrain" train -c run.toml $quick --set train.steps=3 --set train.lr=1e-3 --set train.out_dir=\"tuned\" > tuned.log 2>&1 ||
  { cat tuned.log; exit 1; }
grep -q "init_from [^ ]*/reference.mdlus: PhysicsNeMo .mdlus (zip)" tuned.log || { echo "FAIL: no init_from report"; cat tuned.log; exit 1; }
grep -q "tensors: $tensors loaded, 0 remapped, 0 initialised, 0 unexpected; 100.0%" tuned.log ||
  { echo "FAIL: not every tensor loaded"; grep -A3 "init_from" tuned.log; exit 1; }
"$wxtrain" forecast --checkpoint tuned/checkpoint.pt --steps 2 --start 30 -o wxtrain.nc
"$wxtrain" export --checkpoint untouched/checkpoint.pt -o untouched/export/model.mdlus
"$wxtrain" export --checkpoint tuned/checkpoint.pt -o export/model.mdlus
"$wxtrain" forecast --checkpoint export/model.mdlus -c run.toml --steps 2 --start 30 -o from_mdlus.nc 2> forecast_mdlus.log ||
  { cat forecast_mdlus.log; exit 1; }
"$python" - wxtrain.nc from_mdlus.nc <<'PY'
import sys
import numpy as np
import xarray as xr
a, b = xr.open_dataset(sys.argv[1]), xr.open_dataset(sys.argv[2])
for name in a.data_vars:
    x, y = a[name].values, b[name].values
    err = np.abs(x - y).max() / np.abs(x).max()
    assert x.shape == y.shape and err < 1e-6, (name, x.shape, y.shape, err)
print(f"forecast from the exported .mdlus equals the checkpoint's: {', '.join(a.data_vars)} over 2 steps")
PY
# shellcheck disable=SC2086
"$python" "$here/forecast_inputs.py" export/model.mdlus 30 wxtrain.nc states.npy $data
"$REFERENCE_PYTHON" "$here/check_reference_roundtrip.py" reference.mdlus untouched/export/model.mdlus export/model.mdlus states.npy \
  > check.log 2>&1 || { cat check.log; exit 1; }
quiet check.log
echo "$kind: PhysicsNeMo .mdlus -> import -> train -> export -> PhysicsNeMo: ok"
