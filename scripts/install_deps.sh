#!/usr/bin/env bash
# Installs what wxtrain needs to build and run: Debian's packages for everything but LibTorch, and
# LibTorch itself from PyTorch's `torch` wheel (libtorch with CUDA, its headers and
# TorchConfig.cmake) in a virtual environment in the checkout, .venv/ (ignored by git).
#
#   WXTRAIN_TORCH_VERSION  the torch wheel to pin (default 2.11.0, what our GPU machines carry)
#   WXTRAIN_VENV           where the virtual environment goes (default <checkout>/.venv)
#   WXTRAIN_NO_VENV=1      skip the wheel: you bring your own LibTorch (-DCMAKE_PREFIX_PATH=...)
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  cmake ninja-build g++ pkg-config
  python3 python3-venv                # the virtual environment that holds the torch wheel
  libtomlplusplus-dev libcli11-dev nlohmann-json3-dev libfmt-dev
  libdnnl2                            # oneDNN's sgemm for fp32 CPU GEMMs (the wheel's MKL runs AVX2 kernels on AMD)
  libgtest-dev
  libcurl4-gnutls-dev                 # HTTP for the MLflow REST API (tracking/mlflow); libnetcdf-dev's curl
  libopenmpi-dev openmpi-bin
  libnetcdf-dev netcdf-bin
  libblosc-dev libzstd-dev liblz4-dev zlib1g-dev   # Zarr's codecs, read natively (data/readers/zarr)
  libeccodes-dev libeccodes-tools                   # GRIB through ecCodes (data/readers/grib)
  python3-xarray python3-zarr python3-numcodecs python3-netcdf4 python3-eccodes  # tests only: fixtures written by the field's tools
  clang libclang-rt-14-dev                          # libFuzzer for fuzz/ (scripts/fuzz.sh)
  libncarg-data                       # the January 1996 blizzard NetCDF files used by the demo and tests
)
# No Debian BLAS: the wheel's libtorch_cpu carries MKL with interposable BLAS symbols, and a second
# BLAS in the process (libopenblas0) could take over LibTorch's GEMMs.
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

[ "${WXTRAIN_NO_VENV:-0}" = 1 ] && exit 0
torch_version=${WXTRAIN_TORCH_VERSION:-2.11.0}
venv=${WXTRAIN_VENV:-$PWD/.venv}
# Debian's own python3, not whatever python3 is first on PATH: the venv must outlive shell setups.
python=/usr/bin/python3
[ -x "$python" ] || python=python3
if [ ! -x "$venv/bin/python" ]; then
  echo "creating $venv (LibTorch comes from the torch $torch_version wheel)"
  "$python" -m venv "$venv"
fi
installed=$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("torch"))' 2>/dev/null || true)
if [ "${installed%%+*}" != "$torch_version" ]; then
  echo "installing torch==$torch_version into $venv (about 4.5 GB with its CUDA libraries)"
  "$venv/bin/pip" install --quiet --disable-pip-version-check --no-cache-dir "torch==$torch_version"
fi
