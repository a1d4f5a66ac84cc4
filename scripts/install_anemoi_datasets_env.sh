#!/usr/bin/env bash
# anemoi-datasets (ECMWF's training-data package) in its own virtual environment,
# <checkout>/.venv-anemoi-datasets/ (ignored by git), for the test that proves wxtrain's anemoi
# fixture store is one anemoi-datasets' own open_dataset reads (tests/data, CTest label
# `reference`; skipped without this environment, and says so).
#
# anemoi-datasets 0.5.47 and its anemoi siblings are installed with --no-deps, with what its
# `open_dataset` path imports: numpy 2 (it divides numpy timedeltas by Python ones, which numpy 1
# cannot), zarr 2.18 and numcodecs 0.15 built for it, aniso8601, semantic-version, ruamel.yaml. Its
# full dependency set (pyodc, earthkit, s3 clients) is for building datasets, which the test does
# not do. The rest (pyyaml, requests, ...) comes from Debian's python3 (--system-site-packages);
# the environment's own packages come first on sys.path.
#
#   WXTRAIN_ANEMOI_DATASETS_VENV  where it goes (default <checkout>/.venv-anemoi-datasets)
set -euo pipefail
cd "$(dirname "$0")/.."

env=${WXTRAIN_ANEMOI_DATASETS_VENV:-$PWD/.venv-anemoi-datasets}
anemoi_datasets_version=0.5.47
start=$(date +%s)
if [ ! -x "$env/bin/python" ]; then
  echo "creating $env (anemoi-datasets $anemoi_datasets_version)"
  /usr/bin/python3 -m venv --system-site-packages "$env"
fi
installed=$("$env/bin/python" -c 'import importlib.metadata as m; print(m.version("anemoi-datasets"))' 2>/dev/null || true)
if [ "$installed" != "$anemoi_datasets_version" ]; then
  "$env/bin/pip" install --quiet --disable-pip-version-check --no-deps \
    "anemoi-datasets==$anemoi_datasets_version" "anemoi-utils==0.5.14" "anemoi-transform==0.5.1"
  "$env/bin/pip" install --quiet --disable-pip-version-check \
    "numpy==2.2.6" "zarr==2.18.7" "numcodecs==0.15.1" "aniso8601==10.0.1" "semantic-version" "ruamel-yaml"
fi
"$env/bin/python" - <<'EOF'
import anemoi.datasets, zarr
from anemoi.datasets import open_dataset  # noqa: F401
print(f"anemoi-datasets environment: anemoi-datasets {anemoi.datasets.__version__}, zarr {zarr.__version__}")
EOF
echo "anemoi-datasets environment ready in $(( $(date +%s) - start )) s: $env"
