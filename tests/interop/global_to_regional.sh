#!/bin/sh
# Global to regional: a FourCastNet trained on the globe fine-tunes on a data.region of it, its
# positional embedding cut to the region's patches, and starts ahead of the same regional model
# trained from scratch for the same steps (validation RMSE of the model at every validation).
#   1. global_fixture.py writes global.nc (waves on a 32 x 64 global grid);
#   2. with REFERENCE_PYTHON (label `reference`): PhysicsNeMo builds the global AFNO with fixed
#      weights and saves it (make_reference_afno.py), and the global run starts from that .mdlus
#      (init_from: imported); without it the global run starts from wxtrain's initialisation;
#   3. wxtrain train global_afno.toml (80 steps), then regional_afno.toml twice, 20 steps each:
#      init_from the global checkpoint, and from scratch;
#   4. the fine-tune's validation RMSE is lower than scratch's at every validation (steps 5-20).
#   global_to_regional.sh WXTRAIN SYSTEM_PYTHON SOURCE_DIR WORK_DIR
set -e
wxtrain=$1
python=$2
here=$3/tests/interop
work=$4
rm -rf "$work"
mkdir -p "$work"
cd "$work"
"$python" "$here/global_fixture.py" global.nc
# The run files beside the data: a run file's relative paths resolve against its own folder.
cp "$here/global_afno.toml" "$here/regional_afno.toml" .
start=""
if [ -n "$REFERENCE_PYTHON" ]; then
  "$REFERENCE_PYTHON" "$here/make_reference_afno.py" global_afno.mdlus \
    '{"inp_shape": [32, 64], "in_channels": 2, "out_channels": 2, "patch_size": [4, 4], "embed_dim": 32, "depth": 2, "mlp_ratio": 2.0, "num_blocks": 4}'
  start="--set train.init_from=\"global_afno.mdlus\""
fi
# shellcheck disable=SC2086
"$wxtrain" train -c global_afno.toml $start > global.log 2>&1 || { cat global.log; exit 1; }
[ -z "$start" ] || grep -q "init_from .*/global_afno.mdlus: PhysicsNeMo .mdlus (zip)" global.log ||
  { echo "FAIL: the global run did not start from the reference's .mdlus"; cat global.log; exit 1; }
"$wxtrain" train -c regional_afno.toml --set train.out_dir=finetuned \
  --set 'train.init_from="global/checkpoint.pt"' > finetuned.log 2>&1 || { cat finetuned.log; exit 1; }
grep "embed.pos_embed" finetuned.log
grep -q "embed.pos_embed: cut from the checkpoint's 8 x 16 patches to this grid's 2 x 4" finetuned.log ||
  { echo "FAIL: the positional embedding was not cut to the region"; cat finetuned.log; exit 1; }
"$wxtrain" train -c regional_afno.toml --set train.out_dir=scratch > scratch.log 2>&1 || { cat scratch.log; exit 1; }
"$python" - finetuned/validation.csv scratch/validation.csv <<'PY'
import sys
import pandas as pd
def rmse(path):
    v = pd.read_csv(path)
    v = v[(v.forecaster == "model") & (v.lead == 1)]
    return v.groupby("step").rmse.mean()
tuned, scratch = rmse(sys.argv[1]), rmse(sys.argv[2])
print("validation RMSE (mean over a, b at 6 h) by step: fine-tuned from the global model / from scratch")
for step in tuned.index:
    print(f"  step {step:3d}: {tuned[step]:.4f} / {scratch[step]:.4f}  ({tuned[step] / scratch[step]:.2f}x)")
assert len(tuned) >= 2 and list(tuned.index) == list(scratch.index), (tuned, scratch)
assert (tuned < scratch).all(), "the fine-tuned model is not ahead of the model from scratch at every validation"
PY
