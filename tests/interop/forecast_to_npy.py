"""wxtrain's forecast as one array for the reference environment, which has no NetCDF reader.

usage: forecast_to_npy.py FORECAST.nc MODEL.mdlus OUT.npy
Writes [steps, channels, lat, lon] float32, the channels in the order of the model's outputs as the
export recorded them (metadata.json's wxtrain_channels). Run by the system Python (xarray).
"""
import json
import sys
import zipfile

import numpy as np
import xarray as xr

forecast, mdlus, out = sys.argv[1:4]
names = json.loads(zipfile.ZipFile(mdlus).read("metadata.json"))["wxtrain_channels"]["outputs"]
ds = xr.open_dataset(forecast)
np.save(out, np.stack([ds[n].values for n in names], axis=1).astype(np.float32))
