"""PhysicsNeMo's side of the Pangu and GraphCast .mdlus round trips (pangu_roundtrip.sh,
graphcast_roundtrip.sh).

usage: check_reference_roundtrip.py ORIGINAL.mdlus UNTOUCHED.mdlus EXPORTED.mdlus STATES.npy
  1. UNTOUCHED.mdlus (PhysicsNeMo's ORIGINAL.mdlus imported by wxtrain, trained with lr = 0 and
     exported) holds every tensor of ORIGINAL.mdlus bit for bit: names, dtypes, shapes, values
     (in name order, where PhysicsNeMo writes them in its modules' order);
     both load with Module.from_checkpoint;
  2. EXPORTED.mdlus (a model fine-tuned by wxtrain, exported) loads with Module.from_checkpoint and,
     normalising with global_means.npy / global_stds.npy beside it, steps wxtrain's own forecast on:
     for each k, model((x_k - mean) / std) equals wxtrain's state k + 1, normalised alike.
     STATES.npy is forecast_inputs.py's: [steps + 1, inputs, lat, lon] in wxtrain's input order.
Pangu reads [surface, masks, upper air] and returns (surface, upper air): wxtrain's order is the
upper air first, so the inputs are permuted on the way in and the outputs on the way out, as
Earth2Studio's own Pangu wrapper would. Exits 1 when anything differs beyond float32 round-off.
"""
import io
import json
import os
import pathlib
import sys
import zipfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models", "reference_shims"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import physicsnemo  # noqa: E402

original, untouched, exported, states_file = sys.argv[1:5]
ok = True


def state_dict(path):
    with zipfile.ZipFile(path) as z:
        return torch.load(io.BytesIO(z.read("model.pt")), weights_only=True), json.loads(z.read("args.json"))


a, a_args = state_dict(original)
b, b_args = state_dict(untouched)
# By name: wxtrain writes a state_dict's tensors in name order, PhysicsNeMo in its modules' order
# (load_state_dict reads them by name).
if sorted(a) != sorted(b):
    print(f"FAIL: tensor names differ: only in the original {sorted(set(a) - set(b))}, only in the export {sorted(set(b) - set(a))}")
    ok = False
different = [k for k in a if k in b and (a[k].dtype != b[k].dtype or a[k].shape != b[k].shape or not torch.equal(a[k], b[k]))]
if different:
    print(f"FAIL: {len(different)} tensors differ after import -> export, e.g. {different[:5]}")
    ok = False
if a_args["__args__"] != {k: v for k, v in b_args["__args__"].items() if k in a_args["__args__"]}:
    print(f"FAIL: args.json differs: {a_args['__args__']} / {b_args['__args__']}")
    ok = False
physicsnemo.Module.from_checkpoint(untouched)
print(f"import -> export: {len(a)} tensors ({sum(t.numel() for t in a.values()):,} values) bit-identical: "
      f"{'yes' if ok else 'no'}; PhysicsNeMo loads the export")

model = physicsnemo.Module.from_checkpoint(exported)
model.eval()
folder = pathlib.Path(exported).parent
mean = torch.from_numpy(np.load(folder / "global_means.npy")).reshape(1, -1, 1, 1)
std = torch.from_numpy(np.load(folder / "global_stds.npy")).reshape(1, -1, 1, 1)
states = torch.from_numpy(np.load(states_file))
name = type(model).__name__
if name == "Pangu":
    upper = model.upper_air_channels * model.upper_air_levels
    surface = model.surface_channels
    to_reference = list(range(upper, upper + surface + model.surface_mask_channels)) + list(range(upper))
    outputs = list(range(upper + surface))  # wxtrain's outputs are its first inputs: the upper air, then the surface
else:
    to_reference = list(range(states.shape[1]))
    outputs = list(range(model.output_dim_grid_nodes))


def forward(x):
    y = model(x[:, to_reference])
    if name == "Pangu":
        surface, upper_air = y
        return torch.cat([upper_air.flatten(1, 2), surface], dim=1)
    return y


worst = 0.0
with torch.no_grad():
    for k in range(states.shape[0] - 1):
        x = (states[k:k + 1] - mean) / std
        predicted = forward(x)
        target = (states[k + 1:k + 2, outputs] - mean[:, outputs]) / std[:, outputs]
        error = ((predicted - target).norm() / target.norm()).item()
        worst = max(worst, error)
        print(f"step {k} -> {k + 1}: relative error {error:.2e} (max |difference| {(predicted - target).abs().max().item():.2e})")
print(f"{type(model).__module__}.{name} from {pathlib.Path(exported).name} steps wxtrain's forecast on: worst {worst:.2e}")
ok = ok and worst < 1e-5
sys.exit(0 if ok else 1)
