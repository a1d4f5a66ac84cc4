#!/usr/bin/python3
"""An ERA5-like Zarr store for the loader benchmark, written the way WeatherBench2 writes its own.

    make_bench_store.py OUT.zarr [--times 160]

1-degree grid (181 x 360, latitude north to south), z/t/u/v on 13 pressure levels and t2m, six-hourly
times, one chunk per time step (all levels in it), zarr-python's default Blosc compressor, float32,
consolidated metadata. Fields are smooth waves plus noise, so Blosc compresses them as it does real
data (about 1.1-1.5x), not as it would constant or random bytes.
"""
import argparse

import numpy as np
import pandas as pd
import xarray as xr

LEVELS = [50, 100, 150, 200, 250, 300, 400, 500, 600, 700, 850, 925, 1000]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--times", type=int, default=160)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    lat = np.arange(90.0, -90.5, -1.0)
    lon = np.arange(0.0, 360.0, 1.0)
    times = pd.date_range("2016-01-01", periods=args.times, freq="6H")
    la = np.deg2rad(lat)[:, None]
    lo = np.deg2rad(lon)[None, :]
    data = {}
    for name, base, amp in (("z", 50000.0, 800.0), ("t", 250.0, 8.0), ("u", 5.0, 12.0), ("v", 0.0, 10.0)):
        values = np.empty((len(times), len(LEVELS), len(lat), len(lon)), dtype=np.float32)
        for k in range(len(times)):
            wave = np.cos(la) * np.sin(3 * lo + 0.3 * k) + 0.5 * np.sin(2 * la) * np.cos(5 * lo - 0.2 * k)
            for l, p in enumerate(LEVELS):
                values[k, l] = base * (1 + 0.1 * np.log(1000.0 / p)) + amp * wave
            values[k] += rng.normal(0, 0.01 * amp, values[k].shape).astype(np.float32)
        data[name] = (("time", "level", "latitude", "longitude"), values)
    t2m = np.empty((len(times), len(lat), len(lon)), dtype=np.float32)
    for k in range(len(times)):
        t2m[k] = 285.0 - 30 * np.sin(la) ** 2 + 4 * np.cos(la) * np.sin(lo + 0.4 * k)
    t2m += rng.normal(0, 0.2, t2m.shape).astype(np.float32)
    data["t2m"] = (("time", "latitude", "longitude"), t2m)
    ds = xr.Dataset(data, coords={"time": times, "level": LEVELS, "latitude": lat, "longitude": lon})
    ds.chunk({"time": 1}).to_zarr(args.out, mode="w", consolidated=True)


if __name__ == "__main__":
    main()
