#!/usr/bin/env bash
# Training throughput of wxtrain (bench/train_throughput.cpp) against PyTorch's Python API
# (bench/peer/train_peer.py) on the storm configs, at fp32 and bf16-mixed, batch 8.
#
#   bench/run_train_bench.sh [build-dir]          (default build-perf; ROUNDS=3 REPS=5 BATCH=8 THREADS=1)
#
# The peer is PyTorch from the same torch wheel wxtrain links (.venv/, scripts/install_deps.sh): the
# same ATen, MKL and oneDNN on both sides, eager, and with torch.compile (inductor) as a further
# column (COMPILE=0 skips it). Both sides run with OMP_NUM_THREADS=THREADS, which sizes every pool
# alike: LibTorch's intra-op threads, MKL's and oneDNN's.
#
# The machine is shared and noisy, so every figure is a ratio of runs taken side by side: each
# round runs every (model, precision) pair as wxtrain then PyTorch (then, for the U-Net and the gnn,
# wxtrain's unfused path), in reverse order on odd rounds, so drift and ordering hit all sides
# alike. A run's figure is the median samples/s of REPS repetitions after warm-up; a table cell is
# the median over ROUNDS runs, and the ratio column is the median of the per-round ratios.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-perf}
ROUNDS=${ROUNDS:-3}
REPS=${REPS:-5}
BATCH=${BATCH:-8}
export OMP_NUM_THREADS=${THREADS:-1}
PY=${PY:-.venv/bin/python}  # the torch wheel wxtrain builds against
COMPILE=${COMPILE:-1}
# configs/storm_$m.toml; MODELS="fourcastnet pangu graphcast" picks others.
read -r -a MODELS <<<"${MODELS:-unet vit gnn vit_base}"
PRECISIONS=(fp32 bf16-mixed)

# Steps per repetition, so that one repetition takes roughly a second or more on this CPU.
steps_for() { case "$1" in gnn | vit_base) echo 3 ;; fourcastnet | graphcast | pangu) echo 15 ;; *) echo 10 ;; esac; }

# An existing build directory is used as configured (its test selection left alone).
[[ -f "$BUILD/build.ninja" ]] || cmake -S . -B "$BUILD" -G Ninja -DWXTRAIN_TEST_COMPONENTS=models >/dev/null
ninja -C "$BUILD" -j2 train_throughput >/dev/null

OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
for m in "${MODELS[@]}"; do
  mkdir -p "$OUT/$m"
  "$BUILD/bench/train_throughput" --config "configs/storm_$m.toml" --describe --buffers "$OUT/$m" >"$OUT/$m.json"
done

run_cpp() {
  "$BUILD/bench/train_throughput" --config "configs/storm_$1.toml" --precision "$2" --batch "$BATCH" \
    --warmup 2 --steps "$(steps_for "$1")" --reps "$REPS"
}
# wxtrain's own CPU kernels (U-Net: GroupNorm + SiLU, pooling, upsampling; gnn: edge gather; vit
# and gnn: fp32 GEMMs through oneDNN) against ATen's path, same binary (--unfused). One fusion at a
# time, inside one process: bench/fusion_ab.cpp.
run_unfused() {
  "$BUILD/bench/train_throughput" --config "configs/storm_$1.toml" --precision "$2" --batch "$BATCH" \
    --warmup 2 --steps "$(steps_for "$1")" --reps "$REPS" --unfused
}
run_py() {
  "$PY" bench/peer/train_peer.py --config "configs/storm_$1.toml" --shape "$OUT/$1.json" --buffers "$OUT/$1" \
    --precision "$2" --batch "$BATCH" --warmup 2 --steps "$(steps_for "$1")" --reps "$REPS"
}

# torch.compile'd peer: the first warm-up step compiles (inductor's cache makes later rounds quick).
run_py_compile() {
  "$PY" bench/peer/train_peer.py --config "configs/storm_$1.toml" --shape "$OUT/$1.json" --buffers "$OUT/$1" \
    --precision "$2" --batch "$BATCH" --warmup 3 --steps "$(steps_for "$1")" --reps "$REPS" --compile
}

RESULTS="$OUT/results.txt"
for ((r = 0; r < ROUNDS; ++r)); do
  for m in "${MODELS[@]}"; do
    for p in "${PRECISIONS[@]}"; do
      runs=(run_cpp run_py)
      if [[ $m != vit_base ]]; then runs+=(run_unfused); fi
      if [[ $COMPILE == 1 ]]; then runs+=(run_py_compile); fi
      if ((r % 2 == 1)); then runs=($(printf '%s\n' "${runs[@]}" | tac)); fi
      for run in "${runs[@]}"; do
        "$run" "$m" "$p" | sed "s/^/round=$r config=$m /" | tee -a "$RESULTS" >&2
      done
    done
  done
done

"$PY" - "$RESULTS" <<'EOF'
import collections, statistics, sys
runs = collections.defaultdict(dict)  # (config, precision) -> {(impl, round): samples/s}
threads = set()
for line in open(sys.argv[1]):
    kv = dict(field.split("=", 1) for field in line.split())
    runs[kv["config"], kv["precision"]][kv["impl"], int(kv["round"])] = float(kv["samples_per_s"])
    threads.add(kv["threads"])
rounds = sorted({r for d in runs.values() for _, r in d})
med = statistics.median

def ratio_table(title, impl, other, other_label, with_precision=True):
    """wxtrain against `other` for every (config, precision) that has `other` runs."""
    cells = [(m, p) for (m, p), d in runs.items() if (other, rounds[0]) in d]
    if not cells:
        return
    print(title)
    columns = ["config"] + (["precision"] if with_precision else []) + \
        [f"{impl} samples/s", f"{other_label} samples/s", f"{impl} / {other_label}"]
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for m, p in cells:
        w = [runs[m, p]["wxtrain", r] for r in rounds]
        t = [runs[m, p][other, r] for r in rounds]
        print(f"| {m} | " + (f"{p} | " if with_precision else "") +
              f"{med(w):.1f} | {med(t):.1f} | {med([a / b for a, b in zip(w, t)]):.2f}x |")


ratio_table(f"\nTraining throughput, batch 8, samples/s (median of {len(rounds)} alternating rounds; "
            f"intra-op threads: {', '.join(sorted(threads))})\n", "wxtrain", "pytorch", "PyTorch")
ratio_table("\nAgainst PyTorch with torch.compile (inductor, default mode; the optimizer eager)\n",
            "wxtrain", "pytorch-compile", "PyTorch compiled")
ratio_table("\nwxtrain's CPU kernels (fused ops, oneDNN fp32 GEMMs) against ATen's path (same binary, --unfused)\n",
            "fused", "wxtrain-unfused", "unfused")

print("\nbf16-mixed vs fp32 (same rounds)\n")
print("| config | wxtrain bf16-mixed / fp32 | PyTorch bf16-mixed / fp32 |")
print("|---|---|---|")
for m in dict.fromkeys(m for m, _ in runs):
    f, b = runs[m, "fp32"], runs[m, "bf16-mixed"]
    ratio = lambda impl: med([b[impl, r] / f[impl, r] for r in rounds])
    print(f"| {m} | {ratio('wxtrain'):.2f}x | {ratio('pytorch'):.2f}x |")
EOF
