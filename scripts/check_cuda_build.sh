#!/usr/bin/env bash
# Compiles wxtrain's CUDA-only sources (the CUDA memory meter and the NCCL communicator) against the
# CUDA toolkit in /usr/local/cuda. No GPU is needed, and linking needs a CUDA LibTorch, which
# Debian does not ship: this checks that the code behind -DWXTRAIN_CUDA=ON builds.
set -euo pipefail
cd "$(dirname "$0")/.."
nvcc=${CUDACXX:-/usr/local/cuda/bin/nvcc}
[ -x "$nvcc" ] || { echo "no CUDA toolkit at $nvcc: nothing to check"; exit 0; }
cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DWXTRAIN_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc" \
  -DWXTRAIN_BUILD_TESTS=OFF -DWXTRAIN_BUILD_BENCH=OFF >/dev/null
cmake --build build-cuda --target wxtrain_cuda_objects -j"$(nproc)"
echo "CUDA sources compile (WXTRAIN_CUDA=ON)"
