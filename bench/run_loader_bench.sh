#!/usr/bin/env bash
# Loader speed on a chunked Blosc Zarr store, side by side in one run: wxtrain's loader (inline, and
# with 2 prefetch workers) against xarray + zarr-python (Debian's, the peer users have).
#   bench/run_loader_bench.sh [BUILD_DIR] [ROUNDS]
# Writes the store once (bench/peer/make_bench_store.py, ~1 GB in build/bench/era5_bench.zarr) and
# alternates the sides round by round so machine noise spreads evenly. Both sides use one thread
# for decoding unless prefetch says otherwise (OMP_NUM_THREADS=1, blosc's default of one thread).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rounds=${2:-3}
store="$build/bench/era5_bench.zarr"
python=/usr/bin/python3
[ -d "$store" ] || "$python" bench/peer/make_bench_store.py "$store"
export OMP_NUM_THREADS=1
batches=40
for r in $(seq 1 "$rounds"); do
  echo "--- round $r"
  "$build/bench/loader_archive" --store "$store" --batches $batches --prefetch 0 --rounds 1 | tail -n 1
  "$python" bench/peer/xarray_loader.py --store "$store" --batches $batches --rounds 1 | tail -n 1
  "$build/bench/loader_archive" --store "$store" --batches $batches --prefetch 2 --rounds 1 | tail -n 1
done
