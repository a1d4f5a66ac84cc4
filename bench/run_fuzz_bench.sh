#!/usr/bin/env bash
# The readers' fuzz targets for ten minutes each (issue figures in docs/benchmarks.md):
#   bench/run_fuzz_bench.sh [SECONDS]      (default 600)
# One target at a time, so each has one core; the table it prints goes into docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-600}
echo "fuzzing each target for ${seconds}s ($(date -u +%FT%TZ), $(nproc) cores, $(clang --version | head -n 1))"
exec scripts/fuzz.sh --seconds "$seconds" --build-dir build-fuzz
