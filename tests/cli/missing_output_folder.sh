#!/bin/bash
# missing_output_folder.sh WXTRAIN DIR — an output path whose folder is missing and cannot be made
# (its parent is not the user's to write) is reported as missing first, with the reason it cannot
# be created second, never as a bare "Permission denied" about a folder that does not exist. Run as
# an unprivileged user: as root through setpriv (nobody), else as the user itself.
set -u
wxtrain="$1"
dir="$2"
work="$dir/missing_output_folder"
rm -rf "$work"
mkdir -p "$work/locked"
chmod 755 "$work" "$work/locked"
run=()
if [ "$(id -u)" -eq 0 ]; then
  command -v setpriv >/dev/null || { echo "SKIP: root without setpriv"; exit 77; }
  run=(setpriv --reuid=65534 --regid=65534 --clear-groups --)
  setpriv --reuid=65534 --regid=65534 --clear-groups -- test -x "$wxtrain" ||
    { echo "SKIP: nobody cannot run $wxtrain"; exit 77; }
else
  chmod 555 "$work/locked"
fi
out="$("${run[@]}" "$wxtrain" estimate -c "$dir/good.toml" --analytic --svg "$work/locked/plots/memory.svg" 2>&1)"
code=$?
chmod 755 "$work/locked"
printf '%s\n' "$out"
echo "--- exit status $code"
[ "$code" -eq 1 ] || { echo "FAIL: expected exit status 1"; exit 1; }
grep -qF "error: cannot write $work/locked/plots: No such file or directory; the folder does not exist and cannot be created in $work/locked (Permission denied)" <<<"$out" ||
  { echo "FAIL: the missing folder is not reported as missing"; exit 1; }
echo "PASS"
