#!/usr/bin/env bash
# The CPU memory estimate against an independent meter: the peak resident set of real training
# steps (`wxtrain profile`, train.device = "cpu") for every zoo model at fp32 and bf16-mixed, at two
# batch sizes, beside what `wxtrain estimate` says (bench/cpu_memory_check.py; docs/benchmarks.md).
#
#   bench/run_cpu_memory_check.sh [build-dir]     (default build; BATCHES="16 48" STEPS=3 THREADS=2)
#
# Exits 1 when an estimated per-sample growth is more than 10% off the measured one.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
[[ -f "$BUILD/build.ninja" ]] || cmake -S . -B "$BUILD" -G Ninja >/dev/null
cmake --build "$BUILD" --target wxtrain >/dev/null
read -r -a batches <<<"${BATCHES:-16 48}"
exec python3 bench/cpu_memory_check.py --wxtrain "$BUILD/cli/wxtrain" --batches "${batches[@]}" \
  --steps "${STEPS:-3}" --threads "${THREADS:-2}" ${JSON:+--json "$JSON"}
