#!/bin/bash
# estimate_plot.sh WXTRAIN DIR — `estimate --svg` without --gpu draws the capacity of the GPUs people
# rent (T4 16GB to B200 180GB), not the five smallest of the catalog; the table's GPU column and the
# plot's GPU curve name the GPU whose overhead they include.
set -u
wxtrain="$1"
dir="$2"
svg="$dir/estimate_plot.svg"
rm -f "$svg"
out="$("$wxtrain" estimate -c "$dir/good.toml" --svg "$svg" 2>&1)"
code=$?
printf '%s\n' "$out"
fail=0
check() {  # check DESCRIPTION COMMAND...
  if "${@:2}"; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi
}
check "estimate exits 0" test "$code" -eq 0
check "the plot is written" test -s "$svg"
for gpu in "T4 16GB" "A10G 24GB" "V100 32GB" "A100 40GB" "L40S 48GB" "A100 80GB" "H100 80GB" "H200 141GB" "B200 180GB"; do
  check "the plot draws the $gpu" grep -qF ">$gpu</text>" "$svg"
done
check "the GPU curve names its GPU" grep -qF ">GPU (with the overhead of a B200 180GB)</text>" "$svg"
check "the table's GPU column names its GPU" grep -qE "^memory per rank +CPU +GPU: B200 180GB" <<<"$out"
exit $fail
