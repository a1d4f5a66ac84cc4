#!/usr/bin/env bash
# Configures and builds wxtrain in build/ (Release, -O2, Ninja, all cores) against the torch wheel in
# .venv/ (scripts/install_deps.sh), or against your own LibTorch:
#   scripts/build.sh -DCMAKE_PREFIX_PATH=/path/to/libtorch
set -euo pipefail
cd "$(dirname "$0")/.."
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >"$log" 2>&1; then
  cat "$log"
  exit 1
fi
grep -E '^-- wxtrain:' "$log" || true
cmake --build build -j"$(nproc)"
