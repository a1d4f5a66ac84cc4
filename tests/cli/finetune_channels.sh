#!/bin/bash
# finetune_channels.sh WXTRAIN DIR — fine-tuning onto other channels, as a user adds a variable to a
# pretrained model: a U-Net trained on five storm variables (DIR/good.toml without v500) starts a
# run on all six plus a computed forcing (train.init_from). The report names what matched and what
# is new, and that the first and last layers were remapped by channel name; a forecast from the
# fine-tuned checkpoint writes the six variables and not the forcing; a checkpoint of another width
# is a clear error.
set -eu
wxtrain="$1"
dir="$2"
work="$dir/finetune"
rm -rf "$work"
mkdir -p "$work"
fail=0
check() {  # check DESCRIPTION COMMAND...
  if "${@:2}"; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi
}

# Five variables: v500's [[data.sources]] entry (the sixth) dropped, up to the blank line after it.
awk '/^\[\[data.sources\]\]/ { n++; if (n == 6) { skip = 1; next } } /^$/ { skip = 0 } !skip' \
  "$dir/good.toml" >"$work/five.toml"
# good.toml with dates, a computed forcing and the pretrained checkpoint.
sed -e 's/^rollout_steps = 1$/rollout_steps = 1\ntime_origin = "1996-01-05"\ntime_step = "6h"\nforcings = ["insolation"]/' \
  "$dir/good.toml" >"$work/six.toml"
check "five.toml has five sources" test "$(grep -c '^\[\[data.sources\]\]' "$work/five.toml")" -eq 5

"$wxtrain" train -q -c "$work/five.toml" --set "train.out_dir=\"$work/five\"" --set train.steps=6 >"$work/five.log" 2>&1 \
  || { cat "$work/five.log"; echo "FAIL: pretraining"; exit 1; }
out="$("$wxtrain" train -q -c "$work/six.toml" --set "train.out_dir=\"$work/six\"" --set train.steps=2 \
  --set "train.init_from=\"$work/five/checkpoint.pt\"" 2>&1)" || { printf '%s\n' "$out"; echo "FAIL: fine-tuning"; exit 1; }
printf '%s\n' "$out"
check "inputs: ten matched, v500's two and insolation new" \
  grep -qE "input channels: 10 matched, 3 new \(v500@t-1, v500@t0, insolation@t\+1\), 0 dropped" <<<"$out"
check "outputs: five matched, v500 new" grep -qE "output channels: 5 matched, 1 new \(v500\), 0 dropped" <<<"$out"
check "the first layer and the head (weight, bias) were remapped, nothing left fresh" \
  grep -qE "tensors: [0-9]+ loaded, 3 remapped \(encoder0.conv1.weight, head.bias, head.weight\), 0 initialised, 0 unexpected" <<<"$out"

"$wxtrain" forecast --checkpoint "$work/six/checkpoint.pt" -o "$work/six.nc" --steps 2 >/dev/null
header="$(ncdump -h "$work/six.nc")"
for v in p t u v u500 v500; do
  check "forecast holds $v" grep -qE "float $v\(time, lat, lon\)" <<<"$header"
done
check "the forcing is not a forecast" test "$(grep -c insolation <<<"$header")" -eq 0

# Onto another architecture: a clear error naming a parameter, exit 1 or 2, no crash.
if out="$("$wxtrain" train -q -c "$work/six.toml" --set "train.out_dir=\"$work/bad\"" --set train.steps=1 \
  --set 'model.channels=[8, 16]' --set "train.init_from=\"$work/five/checkpoint.pt\"" 2>&1)"; then
  echo "FAIL: a checkpoint of another width was accepted"; fail=1
else
  printf '%s\n' "$out" | tail -n 2
  check "the mismatch names a parameter and both shapes" grep -qE "error: .*(shape|\[16).*" <<<"$out"
fi
exit $fail
