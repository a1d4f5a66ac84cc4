#!/usr/bin/env bash
# The reference implementations' environment: NVIDIA PhysicsNeMo (AFNO = FourCastNet, Pangu,
# GraphCastNet) and torch_geometric (GraphCastNet's graph backend) in their own virtual environment,
# <checkout>/.venv-reference/ (ignored by git). The interop tests (CTest label `reference`) run their
# Python half with it; without it they are skipped, and say so.
#
# torch is not downloaded again: the environment reuses the torch of .venv/ (scripts/install_deps.sh,
# 2.11, about 4.5 GB with its CUDA wheels). A .pth file in the new environment's site-packages adds
# .venv's site-packages after its own, so Python imports torch from there and pip sees it (and its
# CUDA wheels) installed and satisfies the requirement instead of fetching it; a package the
# references need in another version than .venv holds goes into .venv-reference, which comes first
# on sys.path, and .venv is never written to (pip does not touch distributions outside its prefix).
#
#   WXTRAIN_VENV            the torch environment to reuse (default <checkout>/.venv)
#   WXTRAIN_REFERENCE_VENV  where this one goes (default <checkout>/.venv-reference)
set -euo pipefail
cd "$(dirname "$0")/.."

base=${WXTRAIN_VENV:-$PWD/.venv}
env=${WXTRAIN_REFERENCE_VENV:-$PWD/.venv-reference}
physicsnemo_version=2.2.2
torch_geometric_version=2.7.0

if [ ! -x "$base/bin/python" ] || ! "$base/bin/python" -c 'import torch' 2>/dev/null; then
  echo "error: no torch in $base: run scripts/install_deps.sh first (the reference environment reuses its torch)" >&2
  exit 1
fi
start=$(date +%s)
if [ ! -x "$env/bin/python" ]; then
  echo "creating $env (PhysicsNeMo $physicsnemo_version, torch_geometric $torch_geometric_version; torch from $base)"
  # The interpreter .venv was made from, so both run the same Python and its wheels' ABI.
  python=$("$base/bin/python" -c 'import sys; print(sys._base_executable)')
  "$python" -m venv "$env"
fi
site() { "$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
site "$base" > "$(site "$env")/wxtrain-torch-from-venv.pth"

installed=$("$env/bin/python" -c 'import importlib.metadata as m; print(m.version("nvidia-physicsnemo"), m.version("scikit-learn"))' 2>/dev/null || true)
if [ "$installed" != "$physicsnemo_version 1.9.1" ]; then
  torch_version=$("$base/bin/python" -c 'import importlib.metadata as m; print(m.version("torch"))')
  # torch pinned to the one already there: pip must resolve it as satisfied, never download it.
  "$env/bin/pip" install --quiet --disable-pip-version-check \
    "nvidia-physicsnemo==$physicsnemo_version" "torch_geometric==$torch_geometric_version" "torch==$torch_version" \
    "scikit-learn==1.9.1" "scipy==1.17.1"  # GraphCastNet builds its graph with them (scikit-learn's KD tree)
fi
# The torch imported must be .venv's, one copy on sys.path.
"$env/bin/python" - "$base" <<'EOF'
import sys, os, torch, physicsnemo
base = os.path.realpath(sys.argv[1])
where = os.path.realpath(torch.__file__)
if not where.startswith(base):
    sys.exit(f"error: torch was imported from {where}, not from {base}")
print(f"reference environment: physicsnemo {physicsnemo.__version__}, torch {torch.__version__} from {base}")
EOF
echo "reference environment ready in $(( $(date +%s) - start )) s: $env"
