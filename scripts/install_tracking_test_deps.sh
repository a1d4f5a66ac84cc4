#!/usr/bin/env bash
# Installs what the tracking tests read runs back with, from PyPI, into their own virtual
# environment .venv-tracking/ in the checkout (ignored by git): MLflow (its server and Python
# client: tests/tracking/mlflow_server.sh) and TensorBoard (its event reader:
# tests/tracking/tensorboard_reader.sh). The product itself needs neither. scripts/test.sh runs it.
#
#   WXTRAIN_TRACKING_VENV  where the environment goes (default <checkout>/.venv-tracking)
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${WXTRAIN_TRACKING_VENV:-$PWD/.venv-tracking}
# The versions the tests were written against; a newer release is a deliberate change here.
want=(mlflow==3.17.2 tensorboard==2.21.0)
python=/usr/bin/python3
[ -x "$python" ] || python=python3
if [ ! -x "$venv/bin/python" ]; then
  echo "creating $venv (mlflow and tensorboard for the tracking tests)"
  "$python" -m venv "$venv"
fi
have=$("$venv/bin/python" -c 'import importlib.metadata as m; print(" ".join(f"{p}=={m.version(p)}" for p in ("mlflow", "tensorboard")))' 2>/dev/null || true)
if [ "$have" != "${want[*]}" ]; then
  echo "installing ${want[*]} into $venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "${want[@]}"
fi
