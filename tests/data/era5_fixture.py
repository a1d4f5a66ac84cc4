#!/usr/bin/python3
"""An ERA5-shaped dataset written by the tools weather people use, for wxtrain's data tests.

    era5_fixture.py OUTDIR

Hourly states over five days with one hour missing (a gap in the archive), pressure-level
variables z(time, level, latitude, longitude) and t on 1000/850/500 hPa, surface t2m and sst (NaN
over land), a 2-D static land-sea mask; latitude runs north to south, longitude 0..350, as ERA5's
files do. Written as:

    era5.zarr       xarray to_zarr, zarr-python's default compressor (Blosc lz4), consolidated
    era5_zstd.zarr  to_zarr with Zstd and one chunk per time step
    era5.nc         to_netcdf (netCDF4), t2m packed as int16 with scale_factor/add_offset
    era5.grib2      ecCodes: one GRIB2 message per (variable, level, time), IEEE-packed
    era5_v3.zarr    Zarr v3, as zarr-python 3 lays it out: zarr.json with consolidated metadata,
                    dimension_names; z and t sharded (sharding_indexed: a shard of 24 steps, one
                    inner chunk per step, blosc inside, a crc32c-checked index), the surface
                    fields bytes + zstd, time as int64 hours with CF units

and, for each store, what xarray itself reads from it (decoded, masked) at every sixth hour for the
channels the tests ask for, as raw little-endian float32 in expected_<store>.f32 with
[time, channel, lat, lon] layout; expected_times.txt lists those hours' dates. Debian's
python3-zarr (2.13) cannot write the Zarr v3 format: the v3 reader is tested on stores written by
the small spec-following writer below (write_v3), which uses numcodecs for the compressed
bytes: what zarr-python 3 would write for this dataset, chunk for chunk.
"""
import json
import os
import struct
import sys

import numpy as np
import pandas as pd
import xarray as xr

CHANNELS = [("z", 500), ("z", 850), ("t", 850), ("t2m", None), ("sst", None)]
TIME_STEP_HOURS = 6
MISSING_HOUR = 54  # a 6-hourly state: the windows across it are skipped


def make_dataset():
    rng = np.random.default_rng(1979)
    times = pd.date_range("2020-01-01", periods=120, freq="H")
    times = times.delete(MISSING_HOUR)
    lat = np.arange(90.0, -90.1, -10.0)  # north to south, as ERA5
    lon = np.arange(0.0, 360.0, 10.0)
    level = np.array([1000, 850, 500], dtype=np.int64)
    T, L, H, W = len(times), len(level), len(lat), len(lon)
    hours = np.asarray((times - times[0]) / pd.Timedelta("1H"), dtype=np.float32)
    la = np.deg2rad(lat)[None, :, None]
    lo = np.deg2rad(lon)[None, None, :]
    phase = (2 * np.pi * hours / 24.0)[:, None, None]
    wave = np.cos(la) * np.sin(lo + phase)  # [T, H, W]
    z = np.stack([9.81 * (110.0 + 1400.0 * (1 - p / 1000.0)) * 10 + 300.0 * wave for p in level], axis=1)
    z = (z + rng.normal(0, 5.0, (T, L, H, W))).astype(np.float32)
    t = np.stack([288.0 - 40.0 * (1 - p / 1000.0) - 30.0 * np.sin(la) ** 2 + 3.0 * wave for p in level], axis=1)
    t = (t + rng.normal(0, 0.3, (T, L, H, W))).astype(np.float32)
    t2m = (290.0 - 35.0 * np.sin(la) ** 2 + 4.0 * wave + rng.normal(0, 0.5, (T, H, W))).astype(np.float32)
    lsm = (np.sin(3 * np.deg2rad(lon))[None, :] * np.cos(np.deg2rad(lat))[:, None] > 0.3).astype(np.float32)
    sst = (285.0 - 20.0 * np.sin(la) ** 2 + 0.5 * wave + rng.normal(0, 0.2, (T, H, W))).astype(np.float32)
    sst = np.where(lsm[None] > 0.5, np.nan, sst).astype(np.float32)
    ds = xr.Dataset(
        {
            "z": (("time", "level", "latitude", "longitude"), z,
                  {"units": "m**2 s**-2", "long_name": "Geopotential"}),
            "t": (("time", "level", "latitude", "longitude"), t, {"units": "K", "long_name": "Temperature"}),
            "t2m": (("time", "latitude", "longitude"), t2m, {"units": "K", "long_name": "2 metre temperature"}),
            "sst": (("time", "latitude", "longitude"), sst, {"units": "K", "long_name": "Sea surface temperature"}),
            "lsm": (("latitude", "longitude"), lsm, {"units": "(0 - 1)", "long_name": "Land-sea mask"}),
        },
        coords={
            "time": times,
            "level": ("level", level, {"units": "millibars", "long_name": "pressure_level"}),
            "latitude": ("latitude", lat, {"units": "degrees_north"}),
            "longitude": ("longitude", lon, {"units": "degrees_east"}),
        },
    )
    return ds


def expected(ds):
    """What xarray reads at every sixth hour for CHANNELS, as [time, channel, lat, lon] float32."""
    hours = (ds.time - ds.time[0]) / np.timedelta64(1, "h")
    sub = ds.isel(time=np.flatnonzero(np.asarray(hours) % TIME_STEP_HOURS == 0))
    fields = []
    for name, lev in CHANNELS:
        v = sub[name] if lev is None else sub[name].sel(level=lev)
        fields.append(np.asarray(v.values, dtype=np.float32))
    return np.stack(fields, axis=1), sub.time


def write_grib(ds, path):
    import eccodes

    lat = ds.latitude.values
    lon = ds.longitude.values
    with open(path, "wb") as out:
        for ti, when in enumerate(pd.to_datetime(ds.time.values)):
            for name, sample, levels in (("z", "regular_ll_pl_grib2", ds.level.values),
                                         ("t", "regular_ll_pl_grib2", ds.level.values),
                                         ("2t", "regular_ll_sfc_grib2", [None])):
                for li, lev in enumerate(levels):
                    h = eccodes.codes_grib_new_from_samples(sample)
                    eccodes.codes_set(h, "Ni", len(lon))
                    eccodes.codes_set(h, "Nj", len(lat))
                    eccodes.codes_set(h, "latitudeOfFirstGridPointInDegrees", float(lat[0]))
                    eccodes.codes_set(h, "longitudeOfFirstGridPointInDegrees", float(lon[0]))
                    eccodes.codes_set(h, "latitudeOfLastGridPointInDegrees", float(lat[-1]))
                    eccodes.codes_set(h, "longitudeOfLastGridPointInDegrees", float(lon[-1]))
                    eccodes.codes_set(h, "iDirectionIncrementInDegrees", 10.0)
                    eccodes.codes_set(h, "jDirectionIncrementInDegrees", 10.0)
                    eccodes.codes_set(h, "jScansPositively", 0)
                    # Every other hour as a 1-hour forecast from the hour before: valid time =
                    # date + time + step, as operational archives mix analyses and forecasts.
                    base = when - pd.Timedelta("1H") if ti % 2 else when
                    eccodes.codes_set(h, "dataDate", int(base.strftime("%Y%m%d")))
                    eccodes.codes_set(h, "dataTime", int(base.strftime("%H%M")))
                    eccodes.codes_set(h, "stepUnits", "h")
                    eccodes.codes_set(h, "forecastTime", 1 if ti % 2 else 0)
                    eccodes.codes_set(h, "shortName", name)
                    if lev is not None:
                        eccodes.codes_set(h, "typeOfLevel", "isobaricInhPa")
                        eccodes.codes_set(h, "level", int(lev))
                        values = ds[name].values[ti, li]
                    else:
                        eccodes.codes_set(h, "typeOfLevel", "heightAboveGround")
                        eccodes.codes_set(h, "level", 2)
                        values = ds["t2m"].values[ti]
                    eccodes.codes_set(h, "packingType", "grid_ieee")
                    eccodes.codes_set_values(h, np.asarray(values, dtype=np.float64).ravel())
                    eccodes.codes_write(h, out)
                    eccodes.codes_release(h)


def crc32c(data):
    """CRC-32C (Castagnoli), the v3 crc32c codec's checksum."""
    table = getattr(crc32c, "table", None)
    if table is None:
        table = []
        for i in range(256):
            c = i
            for _ in range(8):
                c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
            table.append(c)
        crc32c.table = table
    crc = 0xFFFFFFFF
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def write_v3(ds, root):
    import numcodecs

    blosc = numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE)
    zstd = numcodecs.Zstd(level=3)
    os.makedirs(root, exist_ok=True)
    members = {}

    def array(name, values, attrs, dims, chunks, codecs, data_type, encode_chunk, fill):
        folder = os.path.join(root, name)
        os.makedirs(folder, exist_ok=True)
        meta = {"zarr_format": 3, "node_type": "array", "shape": list(values.shape), "data_type": data_type,
                "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunks)}},
                "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
                "fill_value": fill, "codecs": codecs, "attributes": attrs, "dimension_names": list(dims)}
        with open(os.path.join(folder, "zarr.json"), "w") as f:
            json.dump(meta, f, indent=2)
        grid = [-(-n // c) for n, c in zip(values.shape, chunks)]
        for position in np.ndindex(*grid):
            region = tuple(slice(p * c, min((p + 1) * c, n)) for p, c, n in zip(position, chunks, values.shape))
            block = np.zeros(chunks, dtype=values.dtype)
            block[tuple(slice(0, r.stop - r.start) for r in region)] = values[region]
            path = os.path.join(folder, "c", *[str(p) for p in position])
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(encode_chunk(block))
        members[name] = meta

    def sharded(block):
        """A shard of one-step inner chunks, each bytes + blosc, then the index (end, crc32c)."""
        data, index = b"", b""
        for k in range(block.shape[0]):
            chunk = blosc.encode(np.ascontiguousarray(block[k:k + 1]).astype("<f4"))
            index += struct.pack("<QQ", len(data), len(chunk))
            data += chunk
        return data + index + struct.pack("<I", crc32c(index))

    for name in ("z", "t"):
        values = np.asarray(ds[name].values, dtype="<f4")
        shard = (24,) + values.shape[1:]
        codecs = [{"name": "sharding_indexed", "configuration": {
            "chunk_shape": [1] + list(values.shape[1:]),
            "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                       {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle",
                                                           "typesize": 4, "blocksize": 0}}],
            "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
            "index_location": "end"}}]
        array(name, values, dict(ds[name].attrs), ds[name].dims, shard, codecs, "float32", sharded, "NaN")
    zstd_codecs = [{"name": "bytes", "configuration": {"endian": "little"}},
                   {"name": "zstd", "configuration": {"level": 3, "checksum": False}}]
    for name in ("t2m", "sst", "lsm"):
        values = np.asarray(ds[name].values, dtype="<f4")
        chunks = (1,) + values.shape[1:] if values.ndim == 3 else values.shape
        array(name, values, dict(ds[name].attrs), ds[name].dims, chunks, zstd_codecs, "float32",
              lambda b: zstd.encode(np.ascontiguousarray(b)), "NaN")
    hours = ((ds.time.values - ds.time.values[0]) / np.timedelta64(1, "h")).astype("<i8")
    start = pd.Timestamp(ds.time.values[0]).strftime("%Y-%m-%d %H:%M:%S")
    plain = [{"name": "bytes", "configuration": {"endian": "little"}}]
    array("time", hours, {"units": "hours since " + start, "calendar": "proleptic_gregorian"}, ("time",),
          hours.shape, plain, "int64", lambda b: b.astype("<i8").tobytes(), 0)
    for name in ("level", "latitude", "longitude"):
        values = np.asarray(ds[name].values)
        data_type = "int64" if values.dtype.kind == "i" else "float64"
        array(name, values.astype("<i8" if data_type == "int64" else "<f8"), dict(ds[name].attrs), (name,),
              values.shape, plain, data_type, lambda b: b.tobytes(), 0)
    group = {"zarr_format": 3, "node_type": "group", "attributes": {"source": "wxtrain test fixture"},
             "consolidated_metadata": {"kind": "inline", "must_understand": False, "metadata": members}}
    with open(os.path.join(root, "zarr.json"), "w") as f:
        json.dump(group, f, indent=2)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    ds = make_dataset()
    ds.to_zarr(os.path.join(out, "era5.zarr"), mode="w", consolidated=True)
    import numcodecs

    zstd = {name: {"compressor": numcodecs.Zstd(level=3)} for name in ("z", "t", "t2m", "sst", "lsm")}
    ds.chunk({"time": 1}).to_zarr(os.path.join(out, "era5_zstd.zarr"), mode="w", consolidated=True, encoding=zstd)
    ds.to_netcdf(os.path.join(out, "era5.nc"), encoding={
        "t2m": {"dtype": "int16", "scale_factor": 0.002, "add_offset": 280.0, "_FillValue": -32767}})
    write_grib(ds, os.path.join(out, "era5.grib2"))
    write_v3(ds, os.path.join(out, "era5_v3.zarr"))

    for store, opener in (("era5.zarr", xr.open_zarr), ("era5_zstd.zarr", xr.open_zarr),
                          ("era5.nc", xr.open_dataset)):
        with opener(os.path.join(out, store)) as back:
            values, times = expected(back.load())
        values.astype("<f4").tofile(os.path.join(out, "expected_" + store + ".f32"))
    # GRIB: the values written (IEEE-packed, so exact); xarray has no GRIB engine in Debian's packages.
    values, times = expected(ds)
    values.astype("<f4").tofile(os.path.join(out, "expected_era5.grib2.f32"))
    # Zarr v3: the dataset written (no reader of v3 in Debian's Python to ask).
    values.astype("<f4").tofile(os.path.join(out, "expected_era5_v3.zarr.f32"))
    with open(os.path.join(out, "expected_times.txt"), "w") as f:
        for when in pd.to_datetime(times.values):
            f.write(when.strftime("%Y-%m-%dT%H:%M:%S") + "\n")


if __name__ == "__main__":
    main()
