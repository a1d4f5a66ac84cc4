#!/bin/bash
# ensemble_train.sh WXTRAIN CONFIG DIR — a 4-member ensemble of the storm U-Net (CONFIG:
# configs/storm_unet.toml, narrowed to channels [16, 32] and 4 samples a batch to fit CI) trained on the afCRPS for 8 steps, as a user runs it: validation.csv
# has the ensemble's CRPS, spread and spread/skill beside RMSE and ACC (and its rank histogram), the table prints them, and a
# run killed at step 12 (--stop-after, as SIGTERM does) and resumed ends where the uninterrupted run
# ends: the same validation rows, to the last digit, and the same forecast from its checkpoint.
# A run file that asks an ensemble for the MSE loss is refused (exit 2) saying why.
set -eu
wxtrain="$1"
config="$2"
dir="$3"
rm -rf "$dir"
mkdir -p "$dir"
fail=0
check() {  # check DESCRIPTION COMMAND...
  if "${@:2}"; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi
}
ensemble=(--set train.ensemble_members=4 --set train.steps=8 --set train.val_every=4 --set train.checkpoint_every=4
          --set train.warmup_steps=4 --set data.prefetch=0 --set train.batch_size=4 --set "model.channels=[16, 32]"
          --set model.groups=4)

out="$("$wxtrain" train -c "$config" "${ensemble[@]}" --set "train.out_dir=\"$dir/straight\"" 2>&1)" \
  || { printf '%s\n' "$out"; echo "FAIL: training the ensemble"; exit 1; }
printf '%s\n' "$out" | grep -E "^ensemble:|^validation at step 8|^  ensemble of|^  p |model CRPS|^ +6h " || true
check "the header says four members and the afCRPS" grep -qE "^ensemble: 4 members per sample .*afCRPS loss with alpha 0.95" <<<"$out"
check "the table has the CRPS, spread and spread/skill columns" grep -qE "model CRPS .*model spread .*spread/skill" <<<"$out"

csv="$dir/straight/validation.csv"
check "validation.csv has the ensemble columns and the rank histogram's 5 bins" \
  test "$(head -1 "$csv")" = "step,lead,lead_hours,variable,forecaster,rmse,acc,crps,spread,spread_skill,rank_0,rank_1,rank_2,rank_3,rank_4"
check "validation.csv holds the validations at steps 4 and 8, 4 leads x 6 variables x 3 forecasters each" \
  test "$(tail -n +2 "$csv" | wc -l)" -eq 144
# Every model row: a finite CRPS below its ensemble mean's RMSE... and a positive spread.
check "every model row has a finite CRPS, a positive spread and a spread/skill ratio" \
  awk -F, 'NR > 1 && $5 == "model" { n++; if (!($8 > 0) || !($9 > 0) || !($10 > 0) || $8 == "nan") bad++ }
           END { exit !(n == 48 && bad == 0) }' "$csv"
check "persistence rows have a CRPS (their MAE), no spread and no rank histogram" \
  awk -F, 'NR > 1 && $5 == "persistence" { n++; if (!($8 > 0) || $9 != "" || $10 != "" || $11 != "" || $15 != "") bad++ } END { exit !(n == 48 && bad == 0) }' "$csv"

# Killed halfway and resumed: the same run.
"$wxtrain" train -q -c "$config" "${ensemble[@]}" --set "train.out_dir=\"$dir/split\"" --stop-after 4 >"$dir/first.log" 2>&1 \
  || { cat "$dir/first.log"; echo "FAIL: the first half"; exit 1; }
check "the first half stopped at step 4 with a checkpoint" grep -q "stopped at step 4" "$dir/first.log"
"$wxtrain" train -q -c "$config" "${ensemble[@]}" --set "train.out_dir=\"$dir/split\"" --resume >"$dir/second.log" 2>&1 \
  || { cat "$dir/second.log"; echo "FAIL: the resumed half"; exit 1; }
check "the resumed run's validation.csv equals the uninterrupted run's" cmp -s "$csv" "$dir/split/validation.csv"
for run in straight split; do
  "$wxtrain" forecast --checkpoint "$dir/$run/checkpoint.pt" -o "$dir/$run.nc" --steps 2 >"$dir/forecast_$run.log" 2>&1 \
    || { cat "$dir/forecast_$run.log"; echo "FAIL: forecast from $run"; exit 1; }
  ncdump "$dir/$run.nc" | tail -n +2 >"$dir/$run.cdl"
done
check "forecasts from both checkpoints are equal" cmp -s "$dir/straight.cdl" "$dir/split.cdl"

code=0
refused="$("$wxtrain" train -c "$config" --set train.ensemble_members=4 --set train.loss=mse \
  --set "train.out_dir=\"$dir/mse\"" 2>&1)" || code=$?
check "an ensemble with the MSE loss is refused with exit 2" test "$code" -eq 2
check "the refusal names the keys and the way out" \
  grep -qE "train.loss = \"mse\" cannot train train.ensemble_members = 4: .*afCRPS" <<<"$refused"
if [ "$fail" -ne 0 ]; then exit 1; fi
echo "PASS: a 4-member ensemble trains, scores its CRPS and spread, and resumes exactly"
