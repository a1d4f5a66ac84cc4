#!/usr/bin/env bash
# ECMWF's anemoi-models and anemoi-graphs (the AIFS encoder-processor-decoder and the graphs it runs
# on) in their own virtual environment, <checkout>/.venv-anemoi/ (ignored by git). The AIFS tests
# (CTest label `reference`) build anemoi's graph and model with it and compare wxtrain's; without it
# they are skipped, and say so.
#
# Same pattern as scripts/install_reference_env.sh: torch is not downloaded again, a .pth file adds
# .venv's site-packages after this environment's own. Both anemoi packages declare torch<2.11, so
# they go in with --no-deps and their run-time imports are listed here by hand (checked against
# 0.19.0 / 0.9.8; see /work/shared/REFERENCES.md): on torch 2.11 they import and run.
# Separate from .venv-reference so neither pins the other's numpy/scipy/torch_geometric.
#
#   WXTRAIN_VENV         the torch environment to reuse (default <checkout>/.venv)
#   WXTRAIN_ANEMOI_VENV  where this one goes (default <checkout>/.venv-anemoi)
set -euo pipefail
cd "$(dirname "$0")/.."

base=${WXTRAIN_VENV:-$PWD/.venv}
env=${WXTRAIN_ANEMOI_VENV:-$PWD/.venv-anemoi}
models_version=0.19.0
graphs_version=0.9.8

if [ ! -x "$base/bin/python" ] || ! "$base/bin/python" -c 'import torch' 2>/dev/null; then
  echo "error: no torch in $base: run scripts/install_deps.sh first (the anemoi environment reuses its torch)" >&2
  exit 1
fi
start=$(date +%s)
if [ ! -x "$env/bin/python" ]; then
  echo "creating $env (anemoi-models $models_version, anemoi-graphs $graphs_version; torch from $base)"
  python=$("$base/bin/python" -c 'import sys; print(sys._base_executable)')
  "$python" -m venv "$env"
fi
site() { "$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
site "$base" > "$(site "$env")/wxtrain-torch-from-venv.pth"

installed=$("$env/bin/python" -c 'import importlib.metadata as m; print(m.version("anemoi-models"), m.version("anemoi-graphs"))' 2>/dev/null || true)
if [ "$installed" != "$models_version $graphs_version" ]; then
  torch_version=$("$base/bin/python" -c 'import importlib.metadata as m; print(m.version("torch"))')
  "$env/bin/pip" install --quiet --disable-pip-version-check --no-deps \
    "anemoi-models==$models_version" "anemoi-graphs==$graphs_version"
  # Their imports (torch pinned to .venv's so pip resolves it as satisfied, never downloads it).
  # (pip then warns that anemoi declares torch<2.11: expected, they are installed without it.)
  "$env/bin/pip" install --quiet --disable-pip-version-check "torch==$torch_version" \
    anemoi-utils typeguard einops hydra-core "torch_geometric==2.7.0" numpy scipy scikit-learn \
    "netcdf4<1.7.3,>1.7" "trimesh>=4.1" "h3>=4" "healpy>=1.17" networkx matplotlib
fi
"$env/bin/python" - "$base" <<'PY'
import sys, os, torch
import anemoi.models, anemoi.graphs
from anemoi.models.models import AnemoiModelEncProcDec  # noqa: F401  (the class the tests build)
from anemoi.graphs.create import GraphCreator  # noqa: F401
base = os.path.realpath(sys.argv[1])
where = os.path.realpath(torch.__file__)
if not where.startswith(base):
    sys.exit(f"error: torch was imported from {where}, not from {base}")
print(f"anemoi environment: anemoi-models {anemoi.models.__version__}, anemoi-graphs {anemoi.graphs.__version__}, "
      f"torch {torch.__version__} from {base}")
PY
echo "anemoi environment ready in $(( $(date +%s) - start )) s: $env"
