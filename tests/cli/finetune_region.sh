#!/bin/bash
# finetune_region.sh WXTRAIN DIR — a model trained on the whole grid fine-tunes on a data.region crop
# of it: a small Pangu trained on the storm grid (33 x 36, 20-60 N) starts a run on 30-50 N
# (train.init_from). Its Earth-specific bias tables, one per latitude window, are cut to the
# region's windows and its masks rebuilt; the report says so, and everything else loads
# (tests/trainer/test_channel_transfer.cpp: without a region, the tables' sizes are an error).
set -eu
wxtrain="$1"
dir="$2"
work="$dir/finetune_region"
rm -rf "$work"
mkdir -p "$work"
fail=0
check() {  # check DESCRIPTION COMMAND...
  if "${@:2}"; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi
}

# good.toml's storm variables, read by a small Pangu with no upper-air volume: every channel is a
# surface field, 17 x 18 tokens in windows of 3 x 4 (6 latitude windows), 9 x 9 coarse (3).
sed -e '/^\[model\]/,/^$/c\[model]\nname = "pangu"\npatch_size = 2\nembed_dim = 8\nmlp_ratio = 2.0\nwindow = [1, 3, 4]\nstage_depths = [2, 2, 2, 2]\nstage_heads = [2, 2, 2, 2]\n' \
  "$dir/good.toml" >"$work/globe.toml"
printf '\n[data.region]\nlat = [30, 50]\nlon = [-140, -52.5]\n' | cat "$work/globe.toml" - >"$work/region.toml"

"$wxtrain" train -q -c "$work/globe.toml" --set "train.out_dir=\"$work/globe\"" --set train.steps=2 >"$work/globe.log" 2>&1 \
  || { cat "$work/globe.log"; echo "FAIL: training on the whole grid"; exit 1; }
out="$("$wxtrain" train -q -c "$work/region.toml" --set "train.out_dir=\"$work/region\"" --set train.steps=2 \
  --set "train.init_from=\"$work/globe/checkpoint.pt\"" 2>&1)" || { printf '%s\n' "$out"; echo "FAIL: fine-tuning on the region"; exit 1; }
printf '%s\n' "$out"
# 30-50 N: rows 8-24 of the storm grid, 17 rows: 9 x 18 tokens, 3 latitude windows; 5 x 9 coarse, 2.
check "the fine stages' bias tables cut to the region's 3 latitude windows" \
  grep -qE "layer1_block0.attn.earth_bias: Earth-specific bias: 3 latitude windows from the trained grid's 6 \(windows [0-9, ]+\)" <<<"$out"
check "the coarse stages' to 2" \
  grep -qE "layer2_block0.attn.earth_bias: Earth-specific bias: 2 latitude windows from the trained grid's 3" <<<"$out"
check "the masks rebuilt" grep -qE "layer1_block1.shift_mask: the shifted windows' mask, rebuilt for this grid" <<<"$out"
check "everything else loaded, nothing fresh or unexpected" \
  grep -qE "tensors: [0-9]+ loaded, 0 remapped, 0 initialised, 0 unexpected" <<<"$out"
test -f "$work/region/checkpoint.pt" || { echo "FAIL: no fine-tuned checkpoint"; fail=1; }

exit $fail
