"""PhysicsNeMo runs the model wxtrain exported, as Earth2Studio runs FourCastNet.

usage: check_export.py MODEL.mdlus FORECAST.npy
Loads MODEL.mdlus with physicsnemo.Module.from_checkpoint (the class named in its args.json), and
global_means.npy / global_stds.npy beside it; then for each step k of wxtrain's own forecast
(FORECAST.npy: [steps, C, lat, lon], physical units) computes model((x_k - mean) / std) * std + mean
and compares it with wxtrain's step k + 1. Exits 1 when they differ beyond float32 round-off.
"""
import pathlib
import sys

import numpy as np
import torch

import physicsnemo

mdlus, forecast = pathlib.Path(sys.argv[1]), sys.argv[2]
model = physicsnemo.Module.from_checkpoint(str(mdlus))
model.eval()
mean = torch.from_numpy(np.load(mdlus.parent / "global_means.npy"))
std = torch.from_numpy(np.load(mdlus.parent / "global_stds.npy"))
states = torch.from_numpy(np.load(forecast))
worst = 0.0
with torch.no_grad():
    for k in range(states.shape[0] - 1):
        x = (states[k:k + 1] - mean) / std
        predicted = model(x)
        target = (states[k + 1:k + 2] - mean) / std
        error = ((predicted - target).norm() / target.norm()).item()
        worst = max(worst, error)
        print(f"step {k + 1} -> {k + 2}: relative error {error:.2e}")
print(f"{type(model).__module__}.{type(model).__name__} from {mdlus.name} steps wxtrain's forecast on: worst {worst:.2e}")
sys.exit(0 if worst < 1e-5 else 1)
