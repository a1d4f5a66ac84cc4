#!/usr/bin/python3
"""Opens wxtrain ensemble forecasts (forecast --members) with xarray and checks them.

    ensemble_forecast_checks.py members FORECAST N STEPS
        every variable is (time, number, lat, lon) with number an int64 coordinate 0..N-1 carrying
        cfgrib's attributes; values finite but at the masked cells (NaN, the fill value, at the same
        cells in every member and step: the cells missing in every training state); every two
        members differ.
    ensemble_forecast_checks.py prefix SMALL LARGE
        SMALL's members are LARGE's first members, bit for bit (each member draws the noise of its
        own index, whatever the number of members).
    ensemble_forecast_checks.py member0 ENSEMBLE SINGLE
        SINGLE (a forecast without --members: no member dimension) is ENSEMBLE's member 0.
    ensemble_forecast_checks.py same A B
        A and B (NetCDF and Zarr) hold the same values and coordinates.

Several checks run in one call (one start of xarray), separated by "+":
    ensemble_forecast_checks.py members A 3 2 + same A B
Each prints OK or FAIL with a message; exits non-zero when any failed.
"""
import sys

import numpy as np
import xarray as xr


class Failed(Exception):
    pass


def fail(message):
    raise Failed(message)


def open_forecast(path):
    return xr.open_zarr(path) if path.rstrip("/").endswith(".zarr") else xr.open_dataset(path)


def members(path, n, steps):
    ds = open_forecast(path)
    print(ds)
    n, steps = int(n), int(steps)
    if ds.sizes.get("number") != n:
        fail("%s: dimension number is %r, expected %d" % (path, ds.sizes.get("number"), n))
    number = ds["number"]
    if number.dtype != np.int64 or list(number.values) != list(range(n)):
        fail("%s: number is %s %s, expected int64 0..%d" % (path, number.dtype, number.values, n - 1))
    expected = {"long_name": "ensemble member numerical id", "units": "1", "standard_name": "realization"}
    for key, value in expected.items():
        if number.attrs.get(key) != value:
            fail("%s: number's %s is %r, expected %r" % (path, key, number.attrs.get(key), value))
    if not ds.data_vars:
        fail("%s has no variables" % path)
    for name, variable in ds.data_vars.items():
        if variable.dims != ("time", "number", "lat", "lon"):
            fail("%s: %s has dims %s, expected (time, number, lat, lon)" % (path, name, variable.dims))
        values = variable.values
        if values.shape[0] != steps:
            fail("%s: %s has %d steps, expected %d" % (path, name, values.shape[0], steps))
        masked = np.isnan(values[0, 0])
        if masked.all() or not (np.isnan(values) == masked).all() or not np.isfinite(values[:, :, ~masked]).all():
            fail("%s: %s is not finite everywhere but at the same masked cells in every member and step" % (path, name))
        for a in range(n):
            for b in range(a + 1, n):
                if np.array_equal(values[:, a], values[:, b], equal_nan=True):
                    fail("%s: %s members %d and %d are the same forecast" % (path, name, a, b))
        # Selecting by member, as a verification script would.
        if not np.array_equal(variable.sel(number=n - 1).values, values[:, n - 1], equal_nan=True):
            fail("%s: %s.sel(number=%d) is not member %d" % (path, name, n - 1, n - 1))
    spread = float(ds[list(ds.data_vars)[0]].std("number").mean(skipna=True))
    print("OK members", path, "%d members, mean spread of the first variable %.4g" % (n, spread))


def prefix(small, large):
    a, b = open_forecast(small), open_forecast(large)
    n = a.sizes["number"]
    if b.sizes["number"] <= n:
        fail("%s has %d members, not more than %s's %d" % (large, b.sizes["number"], small, n))
    for name in a.data_vars:
        if not np.array_equal(a[name].values, b[name].isel(number=slice(0, n)).values, equal_nan=True):
            fail("%s: members 0..%d differ from %s's first %d" % (name, n - 1, large, n))
    print("OK prefix: %s's %d members are the first of %s's %d" % (small, n, large, b.sizes["number"]))


def member0(ensemble, single):
    a, b = open_forecast(ensemble), open_forecast(single)
    if "number" in b.dims:
        fail("%s (no --members) has a member dimension" % single)
    for name in b.data_vars:
        if not np.array_equal(a[name].isel(number=0).values, b[name].values, equal_nan=True):
            fail("%s: member 0 of %s differs from %s" % (name, ensemble, single))
    print("OK member0: the forecast without --members is member 0")


def same(first, second):
    a, b = open_forecast(first), open_forecast(second)
    for name in ("number", "time", "lat", "lon"):
        if not np.array_equal(a[name].values, b[name].values):
            fail("coordinate %s differs between %s and %s" % (name, first, second))
    for name in a.data_vars:
        if a[name].dims != b[name].dims or not np.array_equal(a[name].values, b[name].values, equal_nan=True):
            fail("%s differs between %s and %s" % (name, first, second))
    print("OK same:", first, second)


if __name__ == "__main__":
    commands = {"members": members, "prefix": prefix, "member0": member0, "same": same}
    calls, call = [], []
    for word in sys.argv[1:] + ["+"]:
        if word != "+":
            call.append(word)
        elif call:
            calls.append(call)
            call = []
    failed = not calls
    for call in calls:
        try:
            if call[0] not in commands:
                fail("unknown check %r; expected one of %s" % (call[0], ", ".join(commands)))
            commands[call[0]](*call[1:])
        except Failed as error:
            print("FAIL:", " ".join(call) + ":", error)
            failed = True
    sys.exit(1 if failed else 0)
