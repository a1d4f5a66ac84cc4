#!/bin/bash
# ensemble_forecast.sh WXTRAIN PYTHON CONFIG DIR — `wxtrain forecast --members N` (issue 24) from a
# 3-member ensemble of the storm U-Net (CONFIG: configs/storm_unet.toml, narrowed to channels
# [8, 16] and trained 2 steps, so the test stays quick): NetCDF and Zarr with a member dimension
# `number` that xarray opens as (time, number, lat, lon), cfgrib's attributes, finite values,
# members that differ; the 3 members are the first 3 of a 5-member forecast (noise per member
# index) and member 0 is the forecast without --members. The run's validation.csv has the rank
# histogram (rank_0..rank_3) and its validation.svg the CRPS and spread panels. --members 2 on a
# deterministic checkpoint and --members 0 are refused with exit 2, saying why.
set -u
wxtrain="$1"
python="$2"
config="$3"
dir="$4"
checks="$(cd "$(dirname "$0")" && pwd)/ensemble_forecast_checks.py"
rm -rf "$dir"
mkdir -p "$dir"
fail=0
check() {  # check DESCRIPTION COMMAND...
  if "${@:2}"; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi
}
tiny=(--set train.steps=2 --set train.val_every=2 --set train.checkpoint_every=2 --set train.warmup_steps=1
      --set train.val_lead_steps=2 --set data.prefetch=0 --set train.batch_size=2 --set "model.channels=[8, 16]"
      --set model.groups=4)

"$wxtrain" train -q -c "$config" "${tiny[@]}" --set train.ensemble_members=3 --set "train.out_dir=\"$dir/ens\"" \
  >"$dir/train_ens.log" 2>&1 || { cat "$dir/train_ens.log"; echo "FAIL: training the ensemble"; exit 1; }
ckpt="$dir/ens/checkpoint.pt"

for out in m3.nc m3.zarr m5.nc one.nc; do
  members=()
  case "$out" in m3.*) members=(--members 3) ;; m5.*) members=(--members 5) ;; esac
  "$wxtrain" forecast --checkpoint "$ckpt" -o "$dir/$out" --steps 2 "${members[@]}" >"$dir/forecast_$out.log" 2>&1 \
    || { cat "$dir/forecast_$out.log"; echo "FAIL: forecast $out"; exit 1; }
done
check "the forecast says how many members it wrote" grep -q "^forecast: 3 member(s) x 2 steps" "$dir/forecast_m3.nc.log"
# One start of xarray for every check of the files (ensemble_forecast_checks.py says what each checks).
check "xarray opens m3.nc and m3.zarr as (time, number, lat, lon) with 3 distinct members; NetCDF and Zarr agree; \
they are the first 3 of --members 5; member 0 is the forecast without --members" \
  "$python" "$checks" members "$dir/m3.nc" 3 2 + members "$dir/m3.zarr" 3 2 + same "$dir/m3.nc" "$dir/m3.zarr" \
  + prefix "$dir/m3.nc" "$dir/m5.nc" + member0 "$dir/m3.nc" "$dir/one.nc"
check "the Zarr store has one chunk per step and member" \
  test "$(ls "$dir/m3.zarr/t" | grep -c '^[0-9]')" -eq 6

# The run's validation: the rank histogram in validation.csv, the CRPS and spread in validation.svg.
csv="$dir/ens/validation.csv"
check "validation.csv has the rank histogram's 4 bins after the ensemble columns" \
  test "$(head -1 "$csv")" = "step,lead,lead_hours,variable,forecaster,rmse,acc,crps,spread,spread_skill,rank_0,rank_1,rank_2,rank_3"
# Every model row counts every verified point of the 10 validation samples once (33 x 36 cells but
# those missing in the data: the same in every row); persistence and climatology rows leave the bins empty.
check "every model row's bins sum to the same positive count of points; the others' are empty" \
  awk -F, 'NR > 1 && $5 == "model" { s = $11 + $12 + $13 + $14; if (n == 0) first = s; n++; if (s <= 0 || s != first || s > 10 * 1188) bad++ }
           NR > 1 && $5 != "model" { if ($11 != "" || $14 != "") bad++ }
           END { exit !(n == 12 && bad == 0) }' "$csv"
svg="$dir/ens/validation.svg"
for v in p t u v u500 v500; do
  check "validation.svg has $v's CRPS panel and its spread-and-RMSE panel" \
    bash -c 'grep -q ">$1 CRPS<" "$2" && grep -q ">$1 spread and RMSE<" "$2"' _ "$v" "$svg"
done
check "validation.svg's legend has the model's spread" grep -q ">model spread<" "$svg"
# 6 variables x (RMSE, ACC, CRPS: 3 forecasters each; spread panel: the model's RMSE and its
# spread; rank histogram: the dashed flat line).
check "validation.svg draws 72 lines, 12 of them dashed (the spread, the rank histogram's flat line)" \
  test "$(grep -c '<polyline' "$svg"):$(grep -c '<polyline[^>]*stroke-dasharray' "$svg")" = "72:12"
for v in p t u v u500 v500; do
  check "validation.svg has $v's rank histogram" grep -q ">$v rank histogram<" "$svg"
done

# A deterministic checkpoint has nothing to draw members from: refused with exit 2, saying why.
"$wxtrain" train -q -c "$config" "${tiny[@]}" --set train.steps=2 --set train.val_every=0 \
  --set "train.out_dir=\"$dir/det\"" >"$dir/train_det.log" 2>&1 \
  || { cat "$dir/train_det.log"; echo "FAIL: training the deterministic model"; exit 1; }
code=0
refused="$("$wxtrain" forecast --checkpoint "$dir/det/checkpoint.pt" -o "$dir/det.nc" --steps 2 --members 2 2>&1)" || code=$?
printf '%s\n' "$refused"
check "--members 2 on a deterministic checkpoint exits 2" test "$code" -eq 2
check "the refusal says the model is deterministic and what an ensemble needs" \
  grep -qE -- "--members 2: .* is a deterministic model .*every member would be the same forecast.*ensemble_members > 1" <<<"$refused"
check "no forecast file is left behind" test ! -e "$dir/det.nc"
code=0
refused="$("$wxtrain" forecast --checkpoint "$ckpt" -o "$dir/zero.nc" --members 0 2>&1)" || code=$?
check "--members 0 exits 2 saying what is expected" test "$code" -eq 2
check "--members 0's message" grep -q -- "--members 0: expected 1 or more" <<<"$refused"
if [ "$fail" -ne 0 ]; then exit 1; fi
echo "PASS: forecast --members writes an ensemble xarray opens, member by member reproducible"
