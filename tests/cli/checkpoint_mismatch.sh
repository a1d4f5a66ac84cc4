#!/bin/bash
# checkpoint_mismatch.sh WXTRAIN DIR — a checkpoint that does not fit the run file is the input's
# error (exit 2) whichever way it is loaded, and the message says what that way requires:
#  - --resume with another [model]: what resume requires (the checkpoint's own [model], or a new run
#    with train.init_from), not train.strict, which --resume does not read;
#  - train.init_from onto another width (strict): exit 2, as --resume;
#  - train.init_from from another architecture with train.strict = false: nothing would load, so
#    an error instead of training from scratch with "0 loaded".
# The storm run file DIR/good.toml comes from make_bad_data.sh.
set -u
wxtrain="$1"
dir="$2"
work="$dir/checkpoint_mismatch"
rm -rf "$work"
fail=0
check() {  # check DESCRIPTION COMMAND...
  if "${@:2}"; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi
}

"$wxtrain" train -q -c "$dir/good.toml" --set "train.out_dir=\"$work/unet\"" --set train.steps=1 >/dev/null 2>&1 ||
  { echo "FAIL: the first training run"; exit 1; }
ckpt="$work/unet/checkpoint.pt"

echo "=== --resume with another [model]"
out="$("$wxtrain" train -q -c "$dir/good.toml" --set "train.out_dir=\"$work/unet\"" --set train.steps=2 \
  --set 'model.channels=[8, 16]' --resume 2>&1)"
code=$?
printf '%s\n' "$out"
check "exit 2" test "$code" -eq 2
check "says what --resume requires" grep -qF -- \
  "--resume continues the run in $work/unet exactly, so [model] must be the one it was trained with (model.name = \"unet\"" <<<"$out"
check "offers a new run from these weights" grep -qF "start a new run with train.init_from = \"$ckpt\"" <<<"$out"

echo "=== train.init_from onto another width"
out="$("$wxtrain" train -q -c "$dir/good.toml" --set "train.out_dir=\"$work/wider\"" --set train.steps=1 \
  --set 'model.channels=[8, 16]' --set "train.init_from=\"$ckpt\"" 2>&1)"
code=$?
printf '%s\n' "$out"
check "exit 2, as --resume" test "$code" -eq 2
check "names a parameter and both shapes" grep -qE "weights do not fit this model: .*\(checkpoint \[[0-9, ]+\], model \[[0-9, ]+\]\)" <<<"$out"

echo "=== train.init_from from another architecture, train.strict = false"
out="$("$wxtrain" train -q -c "$dir/good.toml" --set "train.out_dir=\"$work/gnn\"" --set train.steps=1 \
  --set model.name=gnn --set train.strict=false --set "train.init_from=\"$ckpt\"" 2>&1)"
code=$?
printf '%s\n' "$out"
check "exit 2 instead of training from scratch" test "$code" -eq 2
check "says that no tensor fits" grep -qF "$ckpt: no tensor of the checkpoint fits this model" <<<"$out"
check "nothing was trained" test ! -e "$work/gnn/checkpoint.pt"
exit $fail
