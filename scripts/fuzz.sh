#!/usr/bin/env bash
# Builds the libFuzzer targets in fuzz/ with clang (ASan + UBSan) and runs each for a while.
#
#   scripts/fuzz.sh [--seconds N] [--build-dir DIR] [--only NAME]
#
# Each target starts from its seed corpus (fuzz/corpus/<target>/, copied so the committed seeds
# stay as they are) and runs N seconds (default 10: the short run CTest does in CI; bench/ runs
# 600). Prints one line per target: executions, time, corpus size; a crash stops with the
# reproducer's path and exit 1.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=10
build=build-fuzz
only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --build-dir) build="$2"; shift 2 ;;
    --only) only="$2"; shift 2 ;;
    *) echo "usage: scripts/fuzz.sh [--seconds N] [--build-dir DIR] [--only NAME]" >&2; exit 2 ;;
  esac
done
clangxx=$(command -v clang++ || command -v clang++-14 || true)
clangc=$(command -v clang || command -v clang-14 || true)
if [ -z "$clangxx" ] || [ -z "$clangc" ]; then
  echo "scripts/fuzz.sh: clang is not installed (scripts/install_deps.sh installs it)" >&2
  exit 2
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! { cmake -S fuzz -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER="$clangc" \
         -DCMAKE_CXX_COMPILER="$clangxx" && cmake --build "$build" -j"$(nproc)"; } >"$log" 2>&1; then
  cat "$log"
  exit 1
fi
work=$(mktemp -d)
trap 'rm -f "$log"; rm -rf "$work"' EXIT
status=0
for target in "$build"/*_fuzz; do
  name=$(basename "$target")
  [ -n "$only" ] && [ "$name" != "$only" ] && continue
  corpus="$work/$name"
  mkdir -p "$corpus"
  [ -d "fuzz/corpus/$name" ] && cp -r "fuzz/corpus/$name/." "$corpus/"
  # Detect leaks too; one job; artifacts next to the corpus copy.
  if "$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$work/$name-" \
       -print_final_stats=1 "$corpus" >"$work/$name.log" 2>&1; then
    runs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$work/$name.log" | grep -oE '[0-9]+$' || echo "?")
    units=$(ls "$corpus" | wc -l)
    printf '%-28s %10s runs in %ss, corpus %s inputs, no crash\n' "$name" "$runs" "$seconds" "$units"
  else
    status=1
    echo "$name: CRASH"
    mkdir -p fuzz-artifacts
    cp "$work/$name"-* fuzz-artifacts/ 2>/dev/null || true
    cp "$work/$name.log" "fuzz-artifacts/$name.log"
    # The sanitizer's report, not the library chatter before it.
    sed -n '/==[0-9]*==ERROR\|^SUMMARY\|Test unit written\|deadly signal\|ALARM\|out-of-memory/p' "$work/$name.log" | head -n 20 || true
    echo "reproducer and log copied to fuzz-artifacts/ (run: $target fuzz-artifacts/<file>)"
  fi
done
exit $status
