#!/usr/bin/python3
"""A global field for the global-to-regional fine-tuning test, written by xarray as NetCDF.

usage: global_fixture.py OUT.nc

Two variables, a and b, six-hourly for 60 days on a 32 x 64 global grid (5.625 degrees; latitude
from 90 N southwards, longitude from 0 E, as ERA5 and FourCastNet's grid run): zonal waves 1-4
whose phase speed depends on latitude and wavenumber, b the quadrature of a, and a little noise.
Every region sees the same physics, so a model that learnt it on the globe starts a region ahead.
"""
import sys

import numpy as np
import pandas as pd
import xarray as xr

rng = np.random.default_rng(2026)
times = pd.date_range("2000-01-01", periods=240, freq="6h")
lat = 90.0 - 5.625 * np.arange(32)
lon = 5.625 * np.arange(64)
la = np.deg2rad(lat)[None, :, None]
lo = np.deg2rad(lon)[None, None, :]
t = np.arange(len(times), dtype=np.float64)[:, None, None]
a = np.zeros((len(times), 32, 64))
b = np.zeros_like(a)
for k, amplitude, speed, phase in [(1, 1.0, 0.10, 0.3), (2, 0.7, 0.16, 1.1), (3, 0.5, 0.22, 2.0), (4, 0.35, 0.27, 0.5)]:
    envelope = amplitude * np.cos(la) ** k
    angle = k * lo - speed * k * (0.5 + np.cos(la)) * t + phase
    a += envelope * np.cos(angle)
    b += envelope * np.sin(angle)
a += 0.02 * rng.normal(size=a.shape)
b += 0.02 * rng.normal(size=b.shape)
ds = xr.Dataset({"a": (("time", "latitude", "longitude"), a.astype(np.float32)),
                 "b": (("time", "latitude", "longitude"), b.astype(np.float32))},
                coords={"time": times, "latitude": lat, "longitude": lon})
ds.latitude.attrs["units"] = "degrees_north"
ds.longitude.attrs["units"] = "degrees_east"
ds.to_netcdf(sys.argv[1])
