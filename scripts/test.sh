#!/usr/bin/env bash
# Installs the dependencies, builds, and runs every test (unit, MPI under mpirun -np 2, command line).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
scripts/install_deps.sh
scripts/build.sh
echo "build finished after $(( $(date +%s) - start )) s"

# The CUDA/NCCL code must at least compile where the toolkit is present (no GPU needed).
if [ -x /usr/local/cuda/bin/nvcc ]; then
  scripts/check_cuda_build.sh
fi

# OpenMPI refuses to run as root without these; CI runs as root.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "running the tests ($(( $(date +%s) - start )) s so far)"
ctest --test-dir build --output-on-failure --timeout 900
