#!/usr/bin/env bash
# Training throughput of two builds of wxtrain side by side (bench/train_throughput.cpp), on every
# storm config at fp32 and bf16-mixed: what a refactoring must leave unchanged.
#
#   bench/compare_builds.sh BEFORE/train_throughput AFTER/train_throughput
#       (ROUNDS=3 REPS=3 BATCH=8 THREADS=1; MODELS="unet vit ..." picks configs/storm_<m>.toml)
#
# Each round runs every (config, precision) pair as before then after, in reverse order on odd
# rounds, so drift on a shared machine hits both alike; a cell is the median samples/s over the
# rounds and the ratio the median of the per-round ratios. Ratios to PyTorch follow by multiplying
# the before/after ratio into those of bench/run_train_bench.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
BEFORE=${1:?usage: compare_builds.sh BEFORE_BINARY AFTER_BINARY}
AFTER=${2:?usage: compare_builds.sh BEFORE_BINARY AFTER_BINARY}
ROUNDS=${ROUNDS:-3}
REPS=${REPS:-3}
BATCH=${BATCH:-8}
export OMP_NUM_THREADS=${THREADS:-1}
read -r -a MODELS <<<"${MODELS:-unet vit gnn vit_base fourcastnet pangu graphcast}"
steps_for() { case "$1" in gnn | vit_base) echo 3 ;; fourcastnet | graphcast | pangu) echo 15 ;; *) echo 10 ;; esac; }

RESULTS=$(mktemp)
trap 'rm -f "$RESULTS"' EXIT
for ((r = 0; r < ROUNDS; ++r)); do
  for m in "${MODELS[@]}"; do
    for p in fp32 bf16-mixed; do
      sides=(before after)
      if ((r % 2 == 1)); then sides=(after before); fi
      for side in "${sides[@]}"; do
        binary=$BEFORE
        [[ $side == after ]] && binary=$AFTER
        "$binary" --config "configs/storm_$m.toml" --precision "$p" --batch "$BATCH" --warmup 2 \
          --steps "$(steps_for "$m")" --reps "$REPS" | sed "s/^/round=$r side=$side config=$m /" | tee -a "$RESULTS" >&2
      done
    done
  done
done

python3 - "$RESULTS" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(dict)  # (config, precision) -> {(side, round): samples/s}
for line in open(sys.argv[1]):
    kv = dict(f.split("=", 1) for f in line.split() if "=" in f)
    runs[kv["config"], kv["precision"]][kv["side"], int(kv["round"])] = float(kv["samples_per_s"])
rounds = sorted({r for d in runs.values() for _, r in d})
med = statistics.median
print(f"\nTraining throughput, batch 8, samples/s (median of {len(rounds)} alternating rounds)\n")
print("| config | precision | before | after | after / before | per-round ratios |")
print("|---|---|---|---|---|---|")
for (m, p), d in runs.items():
    b = [d["before", r] for r in rounds]
    a = [d["after", r] for r in rounds]
    ratios = [x / y for x, y in zip(a, b)]
    print(f"| {m} | {p} | {med(b):.1f} | {med(a):.1f} | {med(ratios):.3f} | "
          + ", ".join(f"{x:.3f}" for x in ratios) + " |")
PY
