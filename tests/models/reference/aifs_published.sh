#!/bin/bash
# aifs_published.sh ANEMOI_PYTHON SYSTEM_PYTHON OUT_DIR — AIFS Single 1.0's configuration in
# anemoi: the N320 data grid's 542,080 cells from ecCodes' reduced_gg_pl_320 sample (Debian's
# python3 with the eccodes bindings), then anemoi-graphs' graph onto O96 and anemoi-models'
# parameter count (tests/models/reference/aifs_published_count.py, ~45 s). Exits 77 (skipped)
# without the anemoi environment or without eccodes.
set -u
anemoi="${WXTRAIN_ANEMOI_PYTHON:-$1}"
system="$2"
out="$3"
here="$(cd "$(dirname "$0")" && pwd)"
rm -rf "$out" && mkdir -p "$out"
if [ ! -x "$anemoi" ] || ! "$anemoi" -c "import anemoi.models, anemoi.graphs" 2>/dev/null; then
  echo "SKIPPED: no anemoi environment at $anemoi (scripts/install_anemoi_env.sh, or WXTRAIN_ANEMOI_PYTHON)"
  exit 77
fi
if ! "$system" -c "import eccodes" 2>/dev/null; then
  echo "SKIPPED: $system cannot import eccodes (Debian's python3-eccodes gives the N320 grid)"
  exit 77
fi
"$system" - "$out" <<'PY' || exit 1
import sys
import eccodes
import numpy as np
h = eccodes.codes_grib_new_from_samples("reduced_gg_pl_320_grib2")
np.save(sys.argv[1] + "/lat.npy", eccodes.codes_get_array(h, "latitudes"))
np.save(sys.argv[1] + "/lon.npy", eccodes.codes_get_array(h, "longitudes"))
PY
exec "$anemoi" "$here/aifs_published_count.py" "$out/lat.npy" "$out/lon.npy" "$out/count.json"
