#!/bin/sh
# The reference half of the interop tests (CTest label `reference`): the reference environment's
# Python writes the cases (reference_case.py), then the given command checks them.
#   run_reference_tests.sh SOURCE_DIR WORK_DIR COMMAND...
# Exits 77 (CTest: skipped, with this line in its output) when the reference environment is not
# installed: scripts/install_reference_env.sh makes it, and scripts/test.sh runs it first.
src=$1
work=$2
shift 2
env=${WXTRAIN_REFERENCE_VENV:-$src/.venv-reference}
python=$env/bin/python
if ! "$python" -c 'import physicsnemo' >/dev/null 2>&1; then
  echo "SKIPPED: no reference environment at $env (scripts/install_reference_env.sh installs PhysicsNeMo there)"
  exit 77
fi
if [ "$work" != - ]; then
  rm -rf "$work"
  mkdir -p "$work"
  "$python" "$src/tests/interop/reference_case.py" "$work" || { echo "reference_case.py failed"; exit 1; }
fi
WXTRAIN_REFERENCE_CASES=$work REFERENCE_PYTHON=$python exec "$@"
