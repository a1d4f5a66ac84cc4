#!/bin/bash
# The test suite's OpenMP wait policy (scripts/test.sh sets OMP_WAIT_POLICY=passive): a few of the
# suite's CPU-bound tests run two at a time, as scripts/test.sh runs them, with libgomp's default
# wait policy and with passive waiting, alternating round by round so both see the same machine.
# Prints each round's wall seconds and the ratio default / passive.
#
#   bench/run_omp_wait_bench.sh [BUILD_DIR=build] [ROUNDS=3] [TESTS_REGEX]
set -eu
cd "$(dirname "$0")/.."
build="${1:-build}"
rounds="${2:-3}"
tests="${3:-^(Trainer.ShortRunOnTheStormBeatsPersistence|TrainingStep.Bf16MixedAndPureBf16Train|Tuner.TwentyProbesLeaveNoMemoryBehind|Estimate.PredictedPeakMatchesMeasuredTrainingStep)$}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
run() {  # $1 = wait policy ("" = libgomp's default); prints wall seconds, fails if a test fails
  local start end
  start=$(date +%s.%N)
  if [ -n "$1" ]; then
    OMP_WAIT_POLICY="$1" ctest --test-dir "$build" -j 2 -R "$tests" >/tmp/omp_wait_bench.log 2>&1
  else
    env -u OMP_WAIT_POLICY ctest --test-dir "$build" -j 2 -R "$tests" >/tmp/omp_wait_bench.log 2>&1
  fi || { cat /tmp/omp_wait_bench.log; exit 1; }
  end=$(date +%s.%N)
  awk -v a="$start" -v b="$end" 'BEGIN {printf "%.1f", b - a}'
}
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| round | default s | passive s | default / passive |"
echo "| ---: | ---: | ---: | ---: |"
for r in $(seq 1 "$rounds"); do
  d=$(run "")
  p=$(run passive)
  echo "| $r | $d | $p | $(awk -v d="$d" -v p="$p" 'BEGIN {printf "%.2f", d / p}') |"
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
