#!/usr/bin/env bash
# The anemoi fixture store (tests/data/cells_fixture.py, written with Debian's python3 and zarr)
# opened by anemoi-datasets' own open_dataset: check_anemoi_store.sh SOURCE_DIR WORK_DIR.
# Exit 77 (CTest: skipped) without the anemoi-datasets environment.
set -euo pipefail
source_dir=$1
work=$2
env=${WXTRAIN_ANEMOI_DATASETS_VENV:-$source_dir/.venv-anemoi-datasets}
if [ ! -x "$env/bin/python" ]; then
  echo "skipped: no anemoi-datasets environment at $env (scripts/install_anemoi_datasets_env.sh makes it)"
  exit 77
fi
rm -rf "$work"
mkdir -p "$work"
/usr/bin/python3 "$source_dir/tests/data/cells_fixture.py" "$work"
"$env/bin/python" "$source_dir/tests/data/check_anemoi_store.py" "$work"
