#!/usr/bin/python3
"""Opens wxtrain forecasts with xarray, as a verification script would, and checks them.

    forecast_checks.py masked FORECAST LAND_TXT VARIABLE STEPS
        VARIABLE is NaN (declared by _FillValue, and missing_value in NetCDF) exactly at the land
        cells in every step and finite elsewhere; t2m is finite everywhere.
    forecast_checks.py reference FORECAST REFERENCE_TIME STEPS STEP_HOURS
        forecast_reference_time is REFERENCE_TIME, time is it plus 1..STEPS steps, lead_time is
        the timedelta between them and a coordinate of every variable; selecting by lead time
        (WeatherBench-style) finds the same values.
    forecast_checks.py same A B
        A and B hold the same values (NaN where the other has NaN), variable by variable.
    forecast_checks.py steps FORECAST STEPS
        FORECAST holds STEPS times.

Exits non-zero with a message on the first difference.
"""
import sys

import numpy as np
import pandas as pd
import xarray as xr


def fail(message):
    print("FAIL:", message)
    sys.exit(1)


def open_forecast(path):
    return xr.open_zarr(path) if path.rstrip("/").endswith(".zarr") else xr.open_dataset(path)


def masked(path, land_txt, variable, steps):
    ds = open_forecast(path)
    print(ds)
    land = np.zeros(ds.sizes["lat"] * ds.sizes["lon"], dtype=bool)
    land[np.loadtxt(land_txt, dtype=int)] = True
    land = land.reshape(ds.sizes["lat"], ds.sizes["lon"])
    values = ds[variable].values
    if values.shape[0] != int(steps):
        fail("%s has %d steps, expected %s" % (variable, values.shape[0], steps))
    for k in range(values.shape[0]):
        nan = np.isnan(values[k])
        if not np.array_equal(nan, land):
            fail("step %d: %s is NaN at %d cells, %d of them land; expected the %d land cells" %
                 (k, variable, nan.sum(), (nan & land).sum(), land.sum()))
    if not np.isfinite(ds["t2m"].values).all():
        fail("t2m has non-finite values")
    encoding = ds[variable].encoding
    if not np.isnan(encoding.get("_FillValue", 0.0)):
        fail("%s's _FillValue is %r, expected NaN" % (variable, encoding.get("_FillValue")))
    if not path.endswith(".zarr") and not np.isnan(encoding.get("missing_value", 0.0)):
        fail("%s's missing_value is %r, expected NaN" % (variable, encoding.get("missing_value")))
    print("OK masked", path)


def reference(path, reference_time, steps, step_hours):
    ds = open_forecast(path)
    print(ds)
    steps, step_hours = int(steps), int(step_hours)
    ref = pd.Timestamp(reference_time)
    if "forecast_reference_time" not in ds.coords:
        fail("no forecast_reference_time coordinate: %s" % list(ds.coords))
    got = pd.Timestamp(ds["forecast_reference_time"].values)
    if got != ref:
        fail("forecast_reference_time %s, expected %s" % (got, ref))
    if ds["forecast_reference_time"].attrs.get("standard_name") != "forecast_reference_time":
        fail("forecast_reference_time's standard_name: %r" % ds["forecast_reference_time"].attrs)
    times = pd.to_datetime(ds["time"].values)
    want = pd.date_range(ref + pd.Timedelta(hours=step_hours), periods=steps, freq="%dH" % step_hours)
    if len(times) != steps or not (times == want).all():
        fail("times %s, expected %s" % (list(times), list(want)))
    if "lead_time" not in ds.coords:
        fail("no lead_time coordinate: %s" % list(ds.coords))
    lead = ds["lead_time"]
    if lead.dtype.kind != "m":
        fail("lead_time is %s, expected a timedelta (CF units: %r)" % (lead.dtype, lead.attrs))
    want_lead = pd.to_timedelta([step_hours * (k + 1) for k in range(steps)], unit="h")
    if not (pd.to_timedelta(lead.values) == want_lead).all():
        fail("lead_time %s, expected %s" % (list(lead.values), list(want_lead)))
    if lead.attrs.get("standard_name") != "forecast_period":
        fail("lead_time's standard_name: %r" % lead.attrs)
    if not (pd.to_datetime(ds["time"].values) == ref + pd.to_timedelta(lead.values)).all():
        fail("time is not forecast_reference_time + lead_time")
    for name in ds.data_vars:
        if "lead_time" not in ds[name].coords or "forecast_reference_time" not in ds[name].coords:
            fail("%s does not carry lead_time and forecast_reference_time" % name)
    # A verification script lines forecasts up by lead time.
    by_lead = ds.swap_dims({"time": "lead_time"}).sel(lead_time=np.timedelta64(2 * step_hours, "h"))
    for name in ds.data_vars:
        if not np.array_equal(by_lead[name].values, ds[name].isel(time=1).values, equal_nan=True):
            fail("%s selected by lead time differs from the second step" % name)
    print("OK reference", path)


def same(a, b):
    da, db = open_forecast(a), open_forecast(b)
    if sorted(da.data_vars) != sorted(db.data_vars):
        fail("variables %s vs %s" % (sorted(da.data_vars), sorted(db.data_vars)))
    for name in da.data_vars:
        x, y = da[name].values, db[name].values
        if x.shape != y.shape or not np.array_equal(x, y, equal_nan=True):
            diff = np.nanmax(np.abs(x - y)) if x.shape == y.shape else "shapes %s %s" % (x.shape, y.shape)
            fail("%s differs between %s and %s: %s" % (name, a, b, diff))
    print("OK same", a, b)


def steps(path, count):
    ds = open_forecast(path)
    if ds.sizes["time"] != int(count):
        fail("%s holds %d times, expected %s" % (path, ds.sizes["time"], count))
    print("OK steps", path, count)


if __name__ == "__main__":
    {"masked": masked, "reference": reference, "same": same, "steps": steps}[sys.argv[1]](*sys.argv[2:])
