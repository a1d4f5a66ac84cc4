#!/usr/bin/env bash
# Issue 26's memory per rank: the small gnn, GraphCast and AIFS of the model-parallel trainer test
# (tests/trainer/test_train_model_parallel_mpi.cpp) on the storm data, at distributed.model_parallel
# = 1, 2 and 4. For each: the per-rank traced peak of `wxtrain profile` in one process (rank 0's
# band, the widest, over the stand-in group: docs/estimator.md "GPUs per model"), what `estimate`
# says per rank (traced and --analytic: the counted bytes, states + activations, at the batch), and
# at P = 2 the real `mpirun -np 2 wxtrain profile`'s rank 0 peak. Memory, not time: a shared
# machine gives the same figures.
#
#   bench/run_model_parallel_memory.sh [BUILD_DIR] [BATCH]
#
# BUILD_DIR (default build) holds cli/wxtrain; runs go to BUILD_DIR/bench/model_parallel_memory.
# fp32, micro-batch BATCH (default 4), rollout 1, no checkpointing, 2 profiled steps.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
batch=${2:-4}
wxtrain="$(pwd)/$build/cli/wxtrain"
work="$build/bench/model_parallel_memory"
export OMP_NUM_THREADS=1
rm -rf "$work"
mkdir -p "$work"
source bench/storm_sources.sh
model_keys() {
  case "$1" in
    gnn) printf 'name = "gnn"\nlatent = 16\nprocessor_layers = 2\nmlp_layers = 1\n' ;;
    graphcast) printf 'name = "graphcast"\nlatent = 16\nprocessor_layers = 2\nmlp_layers = 1\nmesh_refinement = 3\n' ;;
    aifs) printf 'name = "aifs"\nnum_channels = 16\nnum_heads = 2\nmapper_num_heads = 2\nmlp_hidden_ratio = 2\nprocessor_layers = 2\nhidden_grid = "o8"\nwindow_size = 32\nencoder_chunks = 2\n' ;;
  esac
}
json() {  # json FILE KEY.PATH: one number from a JSON file
  python3 -c "import json,sys; d=json.load(open(sys.argv[1]))
for k in sys.argv[2].split('.'): d=d[k]
print(int(d))" "$1" "$2"
}
mib() { awk -v b="$1" 'BEGIN {printf "%.2f", b / 1048576}'; }
printf '%-10s %2s %14s %14s %8s %14s %8s %16s\n' model P "profile MiB" "estimate MiB" "error" "analytic MiB" "error" "mpirun rank 0"
for model in gnn graphcast aifs; do
  run="$work/$model.toml"
  cat > "$run" <<TOML
[model]
$(model_keys "$model")
[data]
history = 2
val_fraction = 0.2
$sources
[train]
batch_size = $batch
seed = 3
TOML
  for p in 1 2 4; do
    set_p=(--set "distributed.model_parallel=$p")
    "$wxtrain" profile -c "$run" "${set_p[@]}" --steps 2 --json > "$work/$model.p$p.profile.json"
    "$wxtrain" estimate -c "$run" "${set_p[@]}" --json > "$work/$model.p$p.estimate.json" || true
    "$wxtrain" estimate -c "$run" "${set_p[@]}" --analytic --json > "$work/$model.p$p.analytic.json" || true
    peak=$(json "$work/$model.p$p.profile.json" peak_bytes)
    # The counted bytes (states + activations) per rank: what the profile's peak counts.
    est=$(python3 -c "import json,sys; c=json.load(open(sys.argv[1]))['cpu']; print(int(c['total_bytes']-c['overhead_bytes']))" "$work/$model.p$p.estimate.json")
    ana=$(python3 -c "import json,sys; c=json.load(open(sys.argv[1]))['cpu']; print(int(c['total_bytes']-c['overhead_bytes']))" "$work/$model.p$p.analytic.json")
    real="-"
    if [ "$p" = 2 ]; then
      mpirun -np 2 --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1 "$wxtrain" profile -c "$run" "${set_p[@]}" \
        --steps 2 --json > "$work/$model.p2.mpirun.json"
      real="$(mib "$(json "$work/$model.p2.mpirun.json" peak_bytes)")"
    fi
    printf '%-10s %2s %14s %14s %+7.1f%% %14s %+7.1f%% %16s\n' "$model" "$p" "$(mib "$peak")" "$(mib "$est")" \
      "$(awk -v a="$est" -v b="$peak" 'BEGIN {print 100 * (a / b - 1)}')" "$(mib "$ana")" \
      "$(awk -v a="$ana" -v b="$peak" 'BEGIN {print 100 * (a / b - 1)}')" "$real"
  done
done
