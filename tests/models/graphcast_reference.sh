#!/bin/sh
# Writes the GraphCastNet fixtures (tests/models/graphcast_reference.py) with the reference
# environment's python: $WXTRAIN_REFERENCE_PYTHON, else the one given as $2. Without a python that
# imports physicsnemo, torch_geometric, sklearn and scipy, the test is skipped (exit 77), visibly.
out="$1"
python="${WXTRAIN_REFERENCE_PYTHON:-$2}"
here="$(cd "$(dirname "$0")" && pwd)"
rm -rf "$out"  # no fixtures left from an earlier run: without the environment the tests skip
if [ -z "$python" ] || [ ! -x "$python" ]; then
  echo "SKIPPED: no reference environment (python '${python}' not found); install it with scripts/install_reference_env.sh or set WXTRAIN_REFERENCE_PYTHON"
  exit 77
fi
if ! "$python" -c "import physicsnemo, torch_geometric, sklearn, scipy" >/dev/null 2>&1; then
  echo "SKIPPED: $python lacks physicsnemo, torch_geometric, scikit-learn or scipy (the reference environment)"
  exit 77
fi
exec "$python" "$here/graphcast_reference.py" "$out"
