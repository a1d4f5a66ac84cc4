#!/bin/bash
# run_fixture.sh PYTHON SCRIPT OUT_DIR [MODULE] — runs a reference fixture script (e.g.
# pangu_fixture.py) with the reference environment's Python, into a fresh OUT_DIR. Without that
# environment (PYTHON missing, or MODULE not importable: physicsnemo by default, anemoi.models for
# the anemoi environment) it says so and exits 77, which CTest reports as skipped (and the
# GoogleTests that read OUT_DIR skip too): a test that needs the reference never passes silently
# without it. WXTRAIN_REFERENCE_PYTHON (PhysicsNeMo's) or WXTRAIN_ANEMOI_PYTHON (anemoi's), when
# set, overrides PYTHON.
set -u
module="${4:-physicsnemo}"
if [ "$module" = physicsnemo ]; then variable=WXTRAIN_REFERENCE_PYTHON; else variable=WXTRAIN_ANEMOI_PYTHON; fi
python="${!variable:-$1}"
script="$2"
out="$3"
rm -rf "$out"
if [ ! -x "$python" ]; then
  echo "SKIPPED: no reference environment at $python (install it, or point $variable at its python)"
  exit 77
fi
if ! "$python" -c "import $module" 2>/dev/null; then
  echo "SKIPPED: $python cannot import $module (the reference environment is incomplete)"
  exit 77
fi
exec "$python" "$script" "$out"
