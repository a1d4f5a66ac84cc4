#!/usr/bin/env bash
# Installs what wxtrain needs to build and run, from Debian's packages only.
set -euo pipefail
packages=(
  cmake ninja-build g++ pkg-config
  libtorch-dev libopenblas0-pthread   # without OpenBLAS, LibTorch's fp32 matmul falls back to the reference BLAS (~50x slower)
  libtomlplusplus-dev libcli11-dev nlohmann-json3-dev libfmt-dev
  libgtest-dev
  libopenmpi-dev openmpi-bin
  libnetcdf-dev netcdf-bin
  libncarg-data                       # the January 1996 blizzard NetCDF files used by the demo and tests
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "installing: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
