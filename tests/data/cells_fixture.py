#!/usr/bin/python3
"""Point-set (reduced Gaussian) data written by the tools weather people use, for wxtrain's tests.

    cells_fixture.py OUTDIR [N]

The ERA5-shaped fixture (era5_fixture.make_dataset: hourly, z and t on 1000/850/500 hPa, t2m, a
wave travelling once round the globe a day) interpolated bilinearly onto the octahedral reduced
Gaussian grid O<N> (default 12: 2N = 24 Gaussian latitudes from numpy's Gauss-Legendre nodes,
20 + 4i points on row i from each pole, 1008 cells), and written as:

    cells.nc     xarray to_netcdf: z(time, level, cell), t(time, level, cell), t2m(time, cell),
                 latitude(cell) / longitude(cell) coordinates in degrees_north / degrees_east
    cells.zarr   the same through xarray to_zarr
    o<N>.grib2   ecCodes: one GRIB2 message per (variable, level, six-hourly time) on reduced_gg
                 O<N> (N, pl), IEEE-packed, as the operational archives hold them
    expected_cells.f32   what xarray reads from cells.nc at every sixth hour for z_500, z_850,
                 t_850, t2m: [time, channel, cell] float32
    expected_stats.txt   per channel the area-weighted mean and standard deviation of those
                 states (weights: Gaussian quadrature weight / points in the row)
    anemoi.zarr  an anemoi-datasets store of the six-hourly states, written with zarr as
                 anemoi-datasets lays one out: data (dates, variables, ensembles = 1, cells) float32
                 with variables z_500, z_850, t_850, 2t, dates datetime64[s], latitudes/longitudes,
                 per-variable mean/stdev/minimum/maximum, attributes variables, frequency,
                 resolution, field_shape, start/end_date, missing_dates (the gap at hour 54 is a
                 missing date: anemoi keeps a regular date axis and lists it, its data NaN)
    anemoi_ensemble.zarr  the same with 2 ensemble members (wxtrain refuses it)
    anemoi_statistics.txt the statistics written there, one line per variable (mean, stdev)
"""
import os
import sys

import numpy as np
import pandas as pd
import xarray as xr
from scipy.interpolate import RegularGridInterpolator

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import era5_fixture  # noqa: E402

CHANNELS = [("z", 500), ("z", 850), ("t", 850), ("t2m", None)]


def octahedral(n):
    x, w = np.polynomial.legendre.leggauss(2 * n)
    lat_rows = np.rad2deg(np.arcsin(x))[::-1]  # north to south
    w_rows = w[::-1]
    pl = [20 + 4 * i for i in range(n)]
    pl = pl + pl[::-1]
    lat, lon, area = [], [], []
    for i, p in enumerate(pl):
        lat += [lat_rows[i]] * p
        lon += list(360.0 * np.arange(p) / p)
        area += [w_rows[i] / 2 / p] * p
    return np.array(lat), np.array(lon), np.array(area), pl, lat_rows


def to_cells(ds, lat, lon):
    """Bilinear interpolation of every (time[, level], latitude, longitude) field onto the cells."""
    src_lat = ds.latitude.values[::-1]  # ascending for the interpolator
    src_lon = np.append(ds.longitude.values, 360.0)  # wrap: 360 is 0
    points = np.stack([lat, lon], axis=1)
    out = {}
    for name in ("z", "t", "t2m"):
        v = ds[name].values[..., ::-1, :]
        v = np.concatenate([v, v[..., :1]], axis=-1)
        flat = v.reshape(-1, v.shape[-2], v.shape[-1])
        cells = np.stack([RegularGridInterpolator((src_lat, src_lon), f)(points) for f in flat])
        out[name] = cells.reshape(v.shape[:-2] + (len(lat),)).astype(np.float32)
    return out


def write_grib(path, ds, values, pl, lat_rows, n):
    import eccodes

    hours = np.asarray((ds.time - ds.time[0]) / np.timedelta64(1, "h"))
    with open(path, "wb") as out:
        for ti in np.flatnonzero(hours % 6 == 0):
            when = pd.Timestamp(ds.time.values[ti])
            for name, grib_name, sample, levels in (("z", "z", "reduced_gg_pl_grib2", ds.level.values),
                                                    ("t", "t", "reduced_gg_pl_grib2", ds.level.values),
                                                    ("t2m", "2t", "reduced_gg_sfc_grib2", [None])):
                for li, lev in enumerate(levels):
                    h = eccodes.codes_grib_new_from_samples(sample)
                    eccodes.codes_set(h, "N", n)
                    eccodes.codes_set(h, "Nj", 2 * n)
                    eccodes.codes_set_array(h, "pl", pl)
                    eccodes.codes_set(h, "latitudeOfFirstGridPointInDegrees", float(lat_rows[0]))
                    eccodes.codes_set(h, "latitudeOfLastGridPointInDegrees", float(lat_rows[-1]))
                    eccodes.codes_set(h, "longitudeOfFirstGridPointInDegrees", 0.0)
                    eccodes.codes_set(h, "longitudeOfLastGridPointInDegrees", 360.0 - 360.0 / max(pl))
                    eccodes.codes_set(h, "dataDate", int(when.strftime("%Y%m%d")))
                    eccodes.codes_set(h, "dataTime", int(when.strftime("%H%M")))
                    eccodes.codes_set(h, "shortName", grib_name)
                    if lev is not None:
                        eccodes.codes_set(h, "typeOfLevel", "isobaricInhPa")
                        eccodes.codes_set(h, "level", int(lev))
                    eccodes.codes_set(h, "packingType", "grid_ieee")
                    field = values[name][ti, li] if lev is not None else values[name][ti]
                    eccodes.codes_set_values(h, field.astype(np.float64))
                    assert eccodes.codes_get(h, "gridType") == "reduced_gg"
                    out.write(eccodes.codes_get_message(h))
                    eccodes.codes_release(h)


def write_anemoi(path, sub, n, members):
    """An anemoi-datasets store of `sub` (the six-hourly states of the cells dataset)."""
    import zarr

    names = ["z_500", "z_850", "t_850", "2t"]
    fields = [sub.z.sel(level=500), sub.z.sel(level=850), sub.t.sel(level=850), sub.t2m]
    present = pd.to_datetime(sub.time.values)
    # A regular six-hourly axis; the dates the archive lacks are anemoi's missing_dates.
    dates = pd.date_range(present[0], present[-1], freq="6H")
    missing = [d for d in dates if d not in set(present)]
    cells = sub.sizes["cell"]
    data = np.full((len(dates), len(names), members, cells), np.nan, dtype=np.float32)
    for k, d in enumerate(dates):
        if d in set(present):
            t = list(present).index(d)
            for v, f in enumerate(fields):
                for m in range(members):
                    data[k, v, m] = f.values[t] + 0.5 * m
    root = zarr.open_group(path, mode="w")
    root.create_dataset("data", data=data, chunks=(1, len(names), members, cells), dtype="float32")
    root.create_dataset("dates", data=np.array(dates, dtype="datetime64[s]"))
    root.create_dataset("latitudes", data=sub.latitude.values.astype(np.float64))
    root.create_dataset("longitudes", data=sub.longitude.values.astype(np.float64))
    valid = data[[d not in missing for d in dates]][:, :, 0, :].astype(np.float64)
    mean = valid.mean(axis=(0, 2))
    stdev = valid.std(axis=(0, 2))
    root.create_dataset("mean", data=mean)
    root.create_dataset("stdev", data=stdev)
    root.create_dataset("minimum", data=valid.min(axis=(0, 2)))
    root.create_dataset("maximum", data=valid.max(axis=(0, 2)))
    root.create_dataset("count", data=np.full(len(names), valid.shape[0] * cells, dtype=np.int64))
    root.create_dataset("has_nans", data=np.zeros(len(names), dtype=bool))
    root.attrs.update({
        "variables": names,
        "name_to_index": {name: i for i, name in enumerate(names)},
        "frequency": "6h",
        "resolution": "o%d" % n,
        "field_shape": [cells],
        "flatten_grid": True,
        "ensemble_dimension": members,
        "start_date": dates[0].isoformat(),
        "end_date": dates[-1].isoformat(),
        "missing_dates": [d.isoformat() for d in missing],
        "statistics_start_date": dates[0].isoformat(),
        "statistics_end_date": dates[-1].isoformat(),
        "version": "0.30",
    })
    zarr.consolidate_metadata(path)
    if members == 1:
        with open(os.path.join(os.path.dirname(path), "anemoi_statistics.txt"), "w") as f:
            for v in range(len(names)):
                f.write("%.10g %.10g\n" % (mean[v], stdev[v]))


def main():
    out = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 12
    os.makedirs(out, exist_ok=True)
    grid = era5_fixture.make_dataset()
    lat, lon, area, pl, lat_rows = octahedral(n)
    values = to_cells(grid, lat, lon)
    ds = xr.Dataset(
        {
            "z": (("time", "level", "cell"), values["z"], {"units": "m**2 s**-2", "long_name": "Geopotential"}),
            "t": (("time", "level", "cell"), values["t"], {"units": "K", "long_name": "Temperature"}),
            "t2m": (("time", "cell"), values["t2m"], {"units": "K", "long_name": "2 metre temperature"}),
        },
        coords={
            "time": grid.time.values,
            "level": ("level", grid.level.values, {"units": "millibars", "long_name": "pressure_level"}),
            "latitude": ("cell", lat, {"units": "degrees_north", "standard_name": "latitude"}),
            "longitude": ("cell", lon, {"units": "degrees_east", "standard_name": "longitude"}),
        },
        attrs={"grid": "O%d" % n},
    )
    ds.to_netcdf(os.path.join(out, "cells.nc"))
    ds.to_zarr(os.path.join(out, "cells.zarr"), mode="w")
    write_grib(os.path.join(out, "o%d.grib2" % n), grid, values, pl, lat_rows, n)

    read = xr.open_dataset(os.path.join(out, "cells.nc"))
    hours = np.asarray((read.time - read.time[0]) / np.timedelta64(1, "h"))
    sub = read.isel(time=np.flatnonzero(hours % 6 == 0))
    fields = []
    for name, lev in CHANNELS:
        v = sub[name] if lev is None else sub[name].sel(level=lev)
        fields.append(np.asarray(v.values, dtype=np.float32))
    expected = np.stack(fields, axis=1)
    expected.astype("<f4").tofile(os.path.join(out, "expected_cells.f32"))
    with open(os.path.join(out, "expected_stats.txt"), "w") as f:
        for c in range(expected.shape[1]):
            x = expected[:, c, :].astype(np.float64)
            w = np.broadcast_to(area, x.shape)
            mean = (w * x).sum() / w.sum()
            std = np.sqrt((w * (x - mean) ** 2).sum() / w.sum())
            f.write("%.10g %.10g\n" % (mean, std))
    write_anemoi(os.path.join(out, "anemoi.zarr"), sub, n, members=1)
    write_anemoi(os.path.join(out, "anemoi_ensemble.zarr"), sub, n, members=2)
    print(expected.shape, len(lat), "cells")


if __name__ == "__main__":
    main()
