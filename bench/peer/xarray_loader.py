#!/usr/bin/python3
"""The peer of bench/loader_archive.cpp: training samples read with xarray + zarr-python, as a
PyTorch Dataset's __getitem__ over a WeatherBench2-style store usually does it.

    xarray_loader.py --store era5.zarr --batches 40 [--batch-size 4] [--rounds 3]

Same channels (z, t, u, v at 500/700/850 hPa and t2m: 13), same windows (history 2 + rollout 1
consecutive states), shuffled, in batches; the same fixed normalisation. One process, one thread of
Python (zarr-python decodes chunks in the calling thread), which is what a DataLoader worker runs.
Prints one line per round and the median samples/s.
"""
import argparse
import time

import numpy as np
import xarray as xr

LEVELS = [500, 700, 850]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", required=True)
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rates = []
    for round_ in range(args.rounds):
        start = time.perf_counter()
        ds = xr.open_zarr(args.store, consolidated=True)
        fields = [ds[name].sel(level=LEVELS) for name in ("z", "t", "u", "v")] + [ds["t2m"]]
        anchors = np.arange(1, ds.sizes["time"] - 1)
        order = np.random.default_rng(round_).permutation(anchors)
        samples, checksum, i = 0, 0.0, 0
        for _ in range(args.batches):
            batch = []
            for _ in range(args.batch_size):
                t = order[i % len(order)]
                i += 1
                window = slice(t - 1, t + 2)
                states = [f.isel(time=window).values for f in fields]  # [3, L, H, W] or [3, H, W]
                x = np.concatenate([s if s.ndim == 4 else s[:, None] for s in states], axis=1)
                batch.append((x.astype(np.float32) - 100.0) / 10.0)
            b = np.stack(batch)
            samples += b.shape[0]
            checksum += float(b[:, 2].sum())
        seconds = time.perf_counter() - start
        rates.append(samples / seconds)
        print("round %d: %d samples in %.3f s = %.1f samples/s (checksum %.6g)" % (round_, samples, seconds,
                                                                                  rates[-1], checksum))
    print("xarray + zarr-python: median %.1f samples/s" % sorted(rates)[len(rates) // 2])


if __name__ == "__main__":
    main()
