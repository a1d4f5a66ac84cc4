#!/usr/bin/env bash
# The run file of the model-parallel benchmarks (bench/run_model_parallel_bench.sh,
# bench/run_aifs_parts_bench.sh): a small gnn, GraphCast or AIFS on the storm data (configs/
# storm_gnn.toml's six NCAR storm fields), micro-batch 4, 20 steps by default.
#
#   bench/model_parallel_run_file.sh OUT MODEL LATENT STEPS [HIDDEN_GRID]
#
# MODEL: gnn, graphcast (M4, 4 processor layers, latent LATENT) or aifs (num_channels LATENT, 4
# heads, window 64, 4 processor layers, hidden grid HIDDEN_GRID: o16 by default).
set -euo pipefail
out=$1
model=$2
latent=$3
steps=$4
hidden=${5:-o16}
source "$(dirname "$0")/storm_sources.sh"
case "$model" in
  gnn) model_keys="name = \"gnn\"
latent = $latent
processor_layers = 4
mlp_layers = 2" ;;
  graphcast) model_keys="name = \"graphcast\"
latent = $latent
processor_layers = 4
mlp_layers = 2
mesh_refinement = 4" ;;
  aifs) model_keys="name = \"aifs\"
num_channels = $latent
num_heads = 4
mapper_num_heads = 4
processor_layers = 4
hidden_grid = \"$hidden\"
window_size = 64" ;;
  *) echo "MODEL must be gnn, graphcast or aifs, got $model" >&2; exit 2 ;;
esac
cat > "$out" <<TOML
[model]
$model_keys

[data]
history = 2
val_fraction = 0.2
$sources
[train]
batch_size = 4
lr = 1e-3
steps = $steps
seed = 3
checkpoint_every = 0
log_every = 1000
TOML
