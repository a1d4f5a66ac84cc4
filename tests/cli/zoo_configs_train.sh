#!/bin/bash
# zoo_configs_train.sh WXTRAIN PYTHON DIR CONFIG... — each bundled run file trains to the end and
# beats persistence on every variable at its first lead (the validation table `wxtrain train`
# prints). Run files that read the ERA5-shaped fixture (file = "../build/era5_fixture/...", relative
# to configs/) get the fixture written into DIR by tests/data/era5_fixture.py and their paths pointed there;
# those reading its point-set version ("../build/cells_fixture/...": O12 cells as anemoi-datasets
# and reduced Gaussian GRIB) by tests/data/cells_fixture.py.
set -eu
wxtrain="$1"
python="$2"
dir="$3"
shift 3
here="$(cd "$(dirname "$0")/.." && pwd)"
rm -rf "$dir"
mkdir -p "$dir"
if grep -q 'build/era5_fixture/' "$@"; then
  "$python" "$here/data/era5_fixture.py" "$dir/era5_fixture" >"$dir/fixture.log" 2>&1 || { cat "$dir/fixture.log"; exit 1; }
fi
if grep -q 'build/cells_fixture/' "$@"; then
  "$python" "$here/data/cells_fixture.py" "$dir/cells_fixture" >"$dir/cells_fixture.log" 2>&1 || { cat "$dir/cells_fixture.log"; exit 1; }
fi

fail=0
for config in "$@"; do
  name="$(basename "$config" .toml)"
  sed -e "s#\(\.\./\)\{0,1\}build/era5_fixture/#$dir/era5_fixture/#g" \
      -e "s#\(\.\./\)\{0,1\}build/cells_fixture/#$dir/cells_fixture/#g" "$config" >"$dir/$name.toml"
  echo "=== $name"
  start=$SECONDS
  if ! output="$(OMP_NUM_THREADS=1 "$wxtrain" train --config "$dir/$name.toml" --set "train.out_dir=$dir/run_$name" 2>&1)"; then
    printf '%s\n' "$output"; echo "FAIL: train $name"; fail=1; continue
  fi
  # The last validation's tables: a variable header line, a column header, then one line per lead
  # "lead model-RMSE persistence-RMSE climatology-RMSE model-ACC persistence-ACC". The first lead
  # of every variable must have a lower RMSE than persistence.
  report="$(awk '/^validation at step/ { n = 0; delete rows } /^  [^ ]/ { v = $1 } /^ +[0-9]+h? / && !(v in rows) { rows[v] = $0; order[++n] = v }
                 END { for (i = 1; i <= n; ++i) print order[i], rows[order[i]] }' <<<"$output")"
  if [ -z "$report" ]; then
    printf '%s\n' "$output"; echo "FAIL: $name printed no validation table"; fail=1; continue
  fi
  # An ensemble's table (its legend names the fair CRPS) goes on "climatology-RMSE model-ACC
  # persistence-ACC model-CRPS persistence-CRPS ...": its CRPS must beat persistence's too.
  ensemble=0
  if grep -q 'fair CRPS' <<<"$output"; then ensemble=1; fi
  while read -r variable lead model persistence _clim _macc _pacc crps pcrps _; do
    if awk -v m="$model" -v p="$persistence" 'BEGIN { exit !(m < p) }'; then
      echo "  $variable $lead: RMSE $model < persistence $persistence"
    else
      echo "FAIL: $name: $variable at $lead has RMSE $model, persistence $persistence"; fail=1
    fi
    if [ "$ensemble" = 1 ]; then
      if awk -v m="$crps" -v p="$pcrps" 'BEGIN { exit !(m != "" && m < p) }'; then
        echo "  $variable $lead: CRPS $crps < persistence $pcrps"
      else
        echo "FAIL: $name: $variable at $lead has CRPS $crps, persistence $pcrps"; fail=1
      fi
    fi
  done <<<"$report"
  # On a point set the start names the grid and its area weights, and the scores say how they weigh.
  if grep -q 'build/cells_fixture/' "$config"; then
    for expected in "on reduced Gaussian O12, 1008 cells (Gaussian weight / points in the row)" "area-weighted RMSE"; do
      grep -qF "$expected" <<<"$output" || { echo "FAIL: $name printed no '$expected'"; fail=1; }
    done
  fi
  grep 'validation skill vs persistence' <<<"$output" || true
  echo "  trained in $((SECONDS - start)) s"
done
exit $fail
