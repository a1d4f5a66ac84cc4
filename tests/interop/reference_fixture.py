#!/usr/bin/python3
"""Small global fields on the grids of PhysicsNeMo's Pangu and GraphCastNet, written by xarray as NetCDF,
for the .mdlus round trips (pangu_roundtrip.sh, graphcast_roundtrip.sh).

usage: reference_fixture.py pangu OUT_DIR      OUT_DIR/pangu.nc, OUT_DIR/pangu_static.nc
       reference_fixture.py graphcast OUT_DIR  OUT_DIR/graphcast.nc

pangu: Pangu-Weather's channels on a 16 x 32 global grid (11.25 degrees; from 90 N southwards and
from 0 E, the grid wxtrain takes a PhysicsNeMo .mdlus to be on): z, q, t, u, v on its 13 pressure
levels, msl, u10, v10, t2m at the surface, six-hourly for 10 days; pangu_static.nc holds its three
constant masks (land_mask, soil_type, topography).
graphcast: two variables, a and b, on GraphCastNet's own 13 x 24 grid (latitudes -90..90, south first;
longitudes -165..180), six-hourly for 10 days, and a constant field c.
Travelling zonal waves whose speed depends on latitude, different per variable and level, and a
little noise: something a model can learn a little of in a few steps.
"""
import os
import sys

import numpy as np
import pandas as pd
import xarray as xr

LEVELS = [1000, 925, 850, 700, 600, 500, 400, 300, 250, 200, 150, 100, 50]


def waves(rng, times, lat, lon, seed_phase, scale, offset):
    la = np.deg2rad(lat)[None, :, None]
    lo = np.deg2rad(lon)[None, None, :]
    t = np.arange(len(times), dtype=np.float64)[:, None, None]
    out = np.zeros((len(times), len(lat), len(lon)))
    for k, amplitude, speed in [(1, 1.0, 0.10), (2, 0.6, 0.16), (3, 0.4, 0.22)]:
        out += amplitude * np.cos(la) ** k * np.cos(k * lo - speed * k * (0.5 + np.cos(la)) * t + seed_phase * k)
    out += 0.05 * rng.normal(size=out.shape)
    return (offset + scale * out).astype(np.float32)


def coords(times, lat, lon):
    c = {"time": times, "latitude": ("latitude", lat, {"units": "degrees_north"}),
         "longitude": ("longitude", lon, {"units": "degrees_east"})}
    return c


def pangu(out):
    rng = np.random.default_rng(22)
    times = pd.date_range("2000-01-01", periods=40, freq="6h")
    lat = 90.0 - 11.25 * np.arange(16)
    lon = 11.25 * np.arange(32)
    data = {}
    # Anomaly-sized offsets: the forecast file holds float32, whose round-off on values many standard
    # deviations from zero (z near 50,000 m2 s-2 varying by 300) would swamp the comparison.
    for v, (scale, offset) in {"z": (300.0, 600.0), "q": (0.002, 0.005), "t": (5.0, 10.0),
                               "u": (8.0, 5.0), "v": (6.0, 0.0)}.items():
        fields = [waves(rng, times, lat, lon, 0.3 * i + ord(v), scale * (1 + 0.05 * i), offset)
                  for i, _ in enumerate(LEVELS)]
        data[v] = (("time", "level", "latitude", "longitude"), np.stack(fields, axis=1))
    for i, v in enumerate(["msl", "u10", "v10", "t2m"]):
        scale, offset = [(800.0, 1000.0), (5.0, 2.0), (4.0, 0.0), (6.0, 10.0)][i]
        data[v] = (("time", "latitude", "longitude"), waves(rng, times, lat, lon, 1.7 * i, scale, offset))
    c = coords(times, lat, lon)
    c["level"] = ("level", np.array(LEVELS, dtype=np.int64), {"units": "millibars"})
    xr.Dataset(data, coords=c).to_netcdf(os.path.join(out, "pangu.nc"))
    la, lo = np.deg2rad(lat)[:, None], np.deg2rad(lon)[None, :]
    static = {"land_mask": (np.sin(3 * lo) * np.cos(la) > 0.3).astype(np.float32),
              "soil_type": np.round(3 + 3 * np.sin(2 * lo + la) * np.cos(la)).astype(np.float32),
              "topography": (2000.0 * np.clip(np.sin(3 * lo) * np.cos(la) - 0.3, 0, None)).astype(np.float32)}
    xr.Dataset({k: (("latitude", "longitude"), v) for k, v in static.items()},
               coords={"latitude": c["latitude"], "longitude": c["longitude"]}).to_netcdf(
        os.path.join(out, "pangu_static.nc"))


def graphcast(out):
    rng = np.random.default_rng(23)
    times = pd.date_range("2000-01-01", periods=40, freq="6h")
    # GraphCastNet's grid in float32, as it computes it (torch.linspace; numpy's agrees to the last bit here).
    lat = np.linspace(-90, 90, 13, dtype=np.float32).astype(np.float64)
    lon = np.linspace(-180, 180, 25, dtype=np.float32)[1:].astype(np.float64)
    data = {"a": (("time", "latitude", "longitude"), waves(rng, times, lat, lon, 0.3, 1.0, 0.0)),
            "b": (("time", "latitude", "longitude"), waves(rng, times, lat, lon, 1.9, 2.0, 1.0)),
            "c": (("latitude", "longitude"), np.cos(np.deg2rad(lat))[:, None] * np.sin(np.deg2rad(lon))[None, :])}
    xr.Dataset(data, coords=coords(times, lat, lon)).to_netcdf(os.path.join(out, "graphcast.nc"))


if __name__ == "__main__":
    os.makedirs(sys.argv[2], exist_ok=True)
    {"pangu": pangu, "graphcast": graphcast}[sys.argv[1]](sys.argv[2])
