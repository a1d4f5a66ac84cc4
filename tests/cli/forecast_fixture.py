#!/usr/bin/python3
"""Files for the forecast tests (forecast_setup.sh), written as users' tools write them.

    forecast_fixture.py OUTDIR

    masked.nc           netCDF4-python: t2m and sst(time, lat, lon), 40 six-hourly states from
                        2020-01-01 on a 16 x 32 grid; sst has _FillValue = -9999 over a land block
                        (rows 5-10, columns 8-15: 48 of 512 cells, 9.4%, in every state) and along
                        row 0 in one state (a missing band)
    nan_nofill.nc       netCDF4-python: t2m and swh with NaN over the same land block and no
                        _FillValue attribute (fill_value=False), as np.nan is often written
    initial.nc          xarray to_netcdf: masked.nc's states 20..25 dated from 2021-03-01 00:00:
                        initial conditions for another date, with the same values
    initial_no_sst.nc   xarray: t2m only
    initial_coarse.nc   xarray: t2m and sst on an 8 x 16 grid
    initial_gap.nc      xarray: initial.nc without 2021-03-01 12:00
    land.txt            the land cells' flat indices (row * 32 + column)
"""
import os
import sys

import netCDF4
import numpy as np
import pandas as pd
import xarray as xr

T, H, W = 40, 16, 32
LAND = (slice(5, 11), slice(8, 16))


def fields():
    rng = np.random.default_rng(2020)
    lat = np.linspace(75.0, -75.0, H)
    lon = np.arange(W) * 360.0 / W
    hours = np.arange(T) * 6.0
    la = np.deg2rad(lat)[None, :, None]
    lo = np.deg2rad(lon)[None, None, :]
    phase = (2 * np.pi * hours / 24.0)[:, None, None]
    wave = np.cos(la) * np.sin(lo + phase)
    t2m = (285.0 - 30.0 * np.sin(la) ** 2 + 4.0 * wave + rng.normal(0, 0.3, (T, H, W))).astype(np.float32)
    sst = (288.0 - 18.0 * np.sin(la) ** 2 + 0.8 * wave + rng.normal(0, 0.1, (T, H, W))).astype(np.float32)
    return lat, lon, hours, t2m, sst


def write_netcdf4(path, lat, lon, hours, variables, fill):
    with netCDF4.Dataset(path, "w") as nc:
        nc.createDimension("time", None)
        nc.createDimension("lat", H)
        nc.createDimension("lon", W)
        v = nc.createVariable("time", "f8", ("time",))
        v.units = "hours since 2020-01-01 00:00:00"
        v.calendar = "standard"
        v[:] = hours
        v = nc.createVariable("lat", "f8", ("lat",))
        v.units = "degrees_north"
        v[:] = lat
        v = nc.createVariable("lon", "f8", ("lon",))
        v.units = "degrees_east"
        v[:] = lon
        for name, (values, units) in variables.items():
            v = nc.createVariable(name, "f4", ("time", "lat", "lon"), fill_value=fill.get(name, False))
            v.units = units
            v[:] = values


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    lat, lon, hours, t2m, sst = fields()

    masked_sst = np.ma.masked_array(sst, mask=np.zeros_like(sst, dtype=bool))
    masked_sst.mask[:, LAND[0], LAND[1]] = True
    masked_sst.mask[7, 0, :] = True  # a band missing in one state
    write_netcdf4(os.path.join(out, "masked.nc"), lat, lon, hours,
                  {"t2m": (t2m, "K"), "sst": (masked_sst, "K")}, {"sst": -9999.0})

    swh = (1.5 + 0.5 * np.abs(np.sin(np.arange(T * H * W).reshape(T, H, W) / 50.0))).astype(np.float32)
    swh[:, LAND[0], LAND[1]] = np.nan
    write_netcdf4(os.path.join(out, "nan_nofill.nc"), lat, lon, hours, {"t2m": (t2m, "K"), "swh": (swh, "m")}, {})

    sst_nan = masked_sst.filled(np.nan)
    times = pd.date_range("2021-03-01", periods=6, freq="6H")
    initial = xr.Dataset(
        {
            "t2m": (("time", "lat", "lon"), t2m[20:26], {"units": "K"}),
            "sst": (("time", "lat", "lon"), sst_nan[20:26], {"units": "K"}),
        },
        coords={"time": times, "lat": ("lat", lat, {"units": "degrees_north"}),
                "lon": ("lon", lon, {"units": "degrees_east"})},
    )
    initial.to_netcdf(os.path.join(out, "initial.nc"))
    initial[["t2m"]].to_netcdf(os.path.join(out, "initial_no_sst.nc"))
    initial.isel(time=[0, 1, 3, 4, 5]).to_netcdf(os.path.join(out, "initial_gap.nc"))
    coarse = initial.isel(lat=slice(0, None, 2), lon=slice(0, None, 2))
    coarse.to_netcdf(os.path.join(out, "initial_coarse.nc"))

    land = [r * W + c for r in range(H) for c in range(W) if 5 <= r <= 10 and 8 <= c <= 15]
    with open(os.path.join(out, "land.txt"), "w") as f:
        f.write("\n".join(map(str, land)) + "\n")


if __name__ == "__main__":
    main()
