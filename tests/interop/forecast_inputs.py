"""wxtrain's forecast as the reference model's successive inputs, for the reference environment
(which has no NetCDF reader).

usage: forecast_inputs.py MODEL.mdlus START FORECAST.nc OUT.npy DATA.nc...
Writes [steps + 1, inputs, lat, lon] float32 in physical units: the state at time index START of the
data, then each step of wxtrain's forecast, each with the forcing and static fields of the data
beside it; the inputs in the model's input order, as the export recorded them (metadata.json's
wxtrain_channels: "z_500@t0" is z on 500 hPa, "land_mask" a constant field). History 1 only: a
model that reads two states would need the state before too. Run by the system Python (xarray).
"""
import json
import sys
import zipfile

import numpy as np
import xarray as xr

mdlus, start, forecast, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
data = xr.merge([xr.open_dataset(f) for f in sys.argv[5:]])
fc = xr.open_dataset(forecast)
inputs = json.loads(zipfile.ZipFile(mdlus).read("metadata.json"))["wxtrain_channels"]["inputs"]


def field(ds, name, time):
    """One channel at a time index of ds (None: a constant field)."""
    if name in ds:
        v = ds[name]
    else:
        var, level = name.rsplit("_", 1)
        v = ds[var].sel(level=float(level))
    if "time" in v.dims:
        v = v.isel(time=time)
    return np.asarray(v.values, dtype=np.float32)


states = []
for k in range(fc.sizes["time"] + 1):
    channels = []
    for full in inputs:
        name, _, when = full.partition("@")
        if k > 0 and when in ("", "t0") and (name in fc or name.rsplit("_", 1)[0] in fc):
            channels.append(field(fc, name, k - 1))  # a forecast state
        else:
            channels.append(field(data, name, start + k))  # the initial state, forcings, constants
    states.append(np.stack(channels))
np.save(out, np.stack(states))
print(f"{out}: {len(states)} inputs of {len(inputs)} channels from {forecast}")
