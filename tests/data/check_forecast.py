#!/usr/bin/python3
"""Opens a wxtrain forecast with xarray, as a user would, and checks what it holds.

    check_forecast.py FORECAST VALUES.f32 FIRST_TIME STEP_HOURS

FORECAST is a NetCDF file or a Zarr store with the channels z_500, z_850, t_850, t2m, sst (the
ERA5-shaped fixture's); VALUES.f32 holds what was written, [time, channel, lat, lon] float32 with
NaN as -1. Exits non-zero with a message on the first difference.
"""
import sys

import numpy as np
import pandas as pd
import xarray as xr


def fail(message):
    print("FAIL:", message)
    sys.exit(1)


def main():
    path, values_path, first, step_hours = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    ds = xr.open_zarr(path) if path.rstrip("/").endswith(".zarr") else xr.open_dataset(path)
    print(ds)
    if ds["z"].dims != ("time", "level", "lat", "lon"):
        fail("z has dims %s, expected (time, level, lat, lon)" % (ds["z"].dims,))
    if list(ds["level"].values) != [500, 850]:
        fail("levels %s, expected [500, 850]" % list(ds["level"].values))
    if ds["t2m"].dims != ("time", "lat", "lon"):
        fail("t2m has dims %s" % (ds["t2m"].dims,))
    times = pd.to_datetime(ds["time"].values)
    want = pd.date_range(first, periods=len(times), freq="%dH" % step_hours)
    if not (times == want).all():
        fail("times %s, expected %s" % (list(times), list(want)))
    T = len(times)
    written = np.fromfile(values_path, dtype="<f4").reshape(T, 5, ds.sizes["lat"], ds.sizes["lon"])
    channels = [ds["z"].sel(level=500), ds["z"].sel(level=850), ds["t"].sel({ds["t"].dims[1]: 850}), ds["t2m"], ds["sst"]]
    for c, field in enumerate(channels):
        got = np.nan_to_num(np.asarray(field.values, dtype=np.float32), nan=-1.0)
        if not np.array_equal(got, written[:, c]):
            fail("channel %d differs: max |diff| %g" % (c, np.abs(got - written[:, c]).max()))
    if ds["z"].attrs.get("units") != "m**2 s**-2":
        fail("z units %r" % ds["z"].attrs.get("units"))
    if float(ds["lat"][0]) != 90.0:
        fail("lat starts at %g" % float(ds["lat"][0]))
    print("OK")


if __name__ == "__main__":
    main()
