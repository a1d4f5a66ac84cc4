#!/usr/bin/env bash
# The GPU check: validates wxtrain on a machine with an NVIDIA GPU, offline, in one command, and
# writes one report (report.md + report.json) with a PASS/FAIL verdict. docs/gpu_check.md says
# what each part measures and how to read the report.
#
#   scripts/gpu_check.sh [--bundle DIR|DIR.tar.gz] [--out DIR] [--build DIR] [--python PY]
#                        [--only STAGES] [--quick]
#
#   --bundle   the dependencies from scripts/bundle_deps.sh (a folder, or its --archive .tar.gz),
#              for a machine without wxtrain's Debian packages; without it they come from the system.
#              Its env.sh is sourced (but LD_LIBRARY_PATH: wxtrain gets an RPATH into the bundle), so
#              ecCodes finds its definitions there; its ncdump, mpirun and grib_ls are run first
#   --out      the report folder (default gpu-check-report/); parts/ and logs/ hold the raw results
#   --build    the build folder (default build-gpu-check/, kept between runs)
#   --python   the Python whose torch (with CUDA) gives LibTorch and runs the PyTorch peer (default
#              $WXTRAIN_PYTHON, else /opt/torch/.venv/bin/python, else .venv/bin/python, else python3)
#   --only     comma-separated stages, run in this order; the report is written from whatever
#              results --out holds, so a long check can be split over several calls:
#                build       configure and build against that torch's LibTorch: the CLI, the
#                            benchmarks, the tests of tests/cuda and tests/autotune (whose CLI test
#                            profile_snapshot_cuda is labelled cuda) (WXTRAIN_TEST_COMPONENTS=cuda;autotune;
#                            set that variable in the environment for more)
#                presets     (f) the published models at their real grids (graphcast-1.0, fourcastnet-0.25,
#                            pangu-0.25): memory (allocated, reserved, context) against the estimate,
#                            training and inference, and samples/s against the PyTorch peers (eager
#                            and torch.compile); most valuable case first, each kept as it is measured
#                ctest       (a) the CTest tests labelled cuda (ctest -L cuda)
#                accuracy    (b) estimator vs measured GPU memory: every storm config, fp32 and
#                            bf16-mixed, checkpointing off and on, batch 1..64
#                fit         (c) the estimate's largest batch for the A10G, L4, A100-40 and T4 vs the
#                            largest that trains with this GPU capped to their memory
#                tune        (d) wxtrain tune-batch on the GPU: its probes and result
#                throughput  (e) samples/s of wxtrain vs the same model in PyTorch's Python API
#              (default: all of them, and earlier results in --out are discarded)
#   --quick    fewer cases: the unet, vit and gnn; batches 1, 8, 64; fits for the T4 and A100-40 in
#              bf16-mixed; throughput at batch 8
#   --configs  comma-separated config names (default every configs/storm_*.toml that trains)
#   --jobs     parallel compile jobs of the build (default: every core)
#   --device cpu  a test of the plumbing (script, binary, report) on a machine without a GPU: every
#              stage on the CPU with tiny cases; the numbers mean nothing and no GPU is checked
#
# Exit codes: 0 PASS (or every stage run so far passed), 1 FAIL (a target missed, a stage failed),
# 2 usage, 3 no CUDA device (no GPU, no driver, or a torch without CUDA) — found before anything is
# built. Targets: estimator error median <= 3% and worst <= 8% of the measured total; no catalog GPU
# for which the estimate's largest batch runs out of memory.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)

usage() {
  echo "usage: scripts/gpu_check.sh [--bundle DIR|DIR.tar.gz] [--out DIR] [--build DIR] [--python PY] [--only STAGES]"
  echo "                            [--quick] [--configs NAMES] [--jobs N] [--device cuda|cpu]"
  echo "       stages: build,presets,ctest,accuracy,fit,tune,throughput (default all); see the comment at the top of $0"
}
die() { echo "gpu_check.sh: $*" >&2; exit 1; }
no_device() { echo "gpu_check.sh: no CUDA device ($*)" >&2; exit 3; }

bundle_arg="" OUT="gpu-check-report" BUILD="build-gpu-check" PY="${WXTRAIN_PYTHON:-}" only="" quick=0 names="" device=cuda
jobs=$(nproc)
while [[ $# -gt 0 ]]; do
  case $1 in
    --bundle) bundle_arg=${2:?--bundle needs a folder or .tar.gz}; shift 2 ;;
    --out) OUT=${2:?--out needs a folder}; shift 2 ;;
    --build) BUILD=${2:?--build needs a folder}; shift 2 ;;
    --python) PY=${2:?--python needs an interpreter}; shift 2 ;;
    --only) only=${2:?--only needs stages}; shift 2 ;;
    --quick) quick=1; shift ;;
    --configs) names=${2:?--configs needs names}; shift 2 ;;
    --jobs) jobs=${2:?--jobs needs a number}; shift 2 ;;
    --device)
      device=${2:?--device needs cuda or cpu}
      [[ $device == cuda || $device == cpu ]] || { echo "gpu_check.sh: --device cuda|cpu" >&2; exit 2; }
      shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
done
# The presets come first after the build: the sizes people train had never been measured (issue 25).
ALL_STAGES=(build presets ctest accuracy fit tune throughput)
stages=("${ALL_STAGES[@]}")
if [[ -n $only ]]; then
  IFS=, read -r -a stages <<<"$only"
  for s in "${stages[@]}"; do
    [[ " ${ALL_STAGES[*]} " == *" $s "* ]] || { echo "gpu_check.sh: unknown stage '$s' (${ALL_STAGES[*]})" >&2; exit 2; }
  done
fi
# Paths are the caller's; relative defaults are in the checkout.
[[ -z $bundle_arg ]] || bundle_arg=$(realpath -m "$bundle_arg")
[[ $PY != */* ]] || PY=$(realpath -ms "$PY")  # -s: a venv's python is a symlink
[[ $OUT == /* || $OUT == gpu-check-report ]] || OUT=$(realpath -m "$OUT")
[[ $BUILD == /* || $BUILD == build-gpu-check ]] || BUILD=$(realpath -m "$BUILD")
cd "$SRC"

# ---- 1. a CUDA device, before anything heavy: the driver's view first (no Python), then torch's
gpu_line=""
if command -v nvidia-smi >/dev/null 2>&1; then
  gpu_line=$(nvidia-smi -L 2>/dev/null | grep -m1 '^GPU ' || true)
fi
if [[ $device == cuda && -z $gpu_line ]] && ! compgen -G '/dev/nvidia[0-9]*' >/dev/null; then
  no_device "nvidia-smi lists no GPU and there is no /dev/nvidia*: this check needs an NVIDIA GPU"
fi
if [[ -z $PY ]]; then
  for p in /opt/torch/.venv/bin/python "$SRC/.venv/bin/python" "$(command -v python3 || true)"; do
    if [[ -n $p && -x $p ]]; then PY=$p; break; fi
  done
fi
[[ -n $PY && -x $(command -v "$PY" || true) ]] || die "no Python found for torch (give --python)"
PY=$(command -v "$PY")
torch_info=$("$PY" -c 'import torch, torch.utils
print(torch.__version__, torch.version.cuda, torch.cuda.is_available(), torch.utils.cmake_prefix_path)' 2>&1 | tail -1) ||
  die "$PY cannot import torch: $torch_info"
read -r torch_version torch_cuda torch_available torch_prefix <<<"$torch_info"
if [[ $device == cuda ]]; then
  [[ $torch_cuda != None ]] || no_device "torch $torch_version in $PY is built without CUDA"
  [[ $torch_available == True ]] || no_device "torch $torch_version (CUDA $torch_cuda) in $PY sees none${gpu_line:+; nvidia-smi: $gpu_line}"
  echo "gpu_check: ${gpu_line:-a CUDA device}; torch $torch_version (CUDA $torch_cuda) from $PY"
else
  echo "gpu_check: --device cpu: a test of the plumbing on the CPU, no GPU is checked; torch $torch_version from $PY"
fi

mkdir -p "$OUT" "$BUILD"
OUT=$(realpath "$OUT") BUILD=$(realpath "$BUILD")
PARTS=$OUT/parts LOGS=$OUT/logs
[[ -n $only ]] || rm -rf "$PARTS" "$LOGS" "$OUT/configs"
mkdir -p "$PARTS" "$LOGS" "$OUT/configs"
if [[ $(id -u) == 0 ]]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi

# pyjson FILE KEY=VALUE...: appends one JSON object (values parsed as JSON where they are JSON).
pyjson() {
  local file=$1
  shift
  "$PY" - "$@" >>"$file" <<'EOF'
import json, sys
obj = {}
for kv in sys.argv[1:]:
    k, v = kv.split("=", 1)
    try:
        obj[k] = json.loads(v)
    except ValueError:
        obj[k] = v
print(json.dumps(obj))
EOF
}
# record_error STAGE WHAT RC LOG: an error line for the report, with the log's tail.
record_error() {
  echo "  FAILED ($3): $2 (log: $4)" >&2
  pyjson "$PARTS/errors.jsonl" kind=error stage="$1" what="$2" exit="$3" log="$4" tail="$(tail -c 1500 "$4" 2>/dev/null || true)"
}

# ---- 2. the dependencies: the bundle's (its env.sh), else the system's
bundle=""
if [[ -n $bundle_arg ]]; then
  if [[ -f $bundle_arg && $bundle_arg == *.tar.gz ]]; then
    dest=$BUILD/deps-bundle
    stamp=$(stat -c '%s %Y' "$bundle_arg")
    if [[ ! -f $dest/.stamp || $(cat "$dest/.stamp") != "$stamp" ]]; then
      rm -rf "$dest"
      mkdir -p "$dest"
      tar -xzf "$bundle_arg" -C "$dest"
      echo "$stamp" >"$dest/.stamp"
    fi
    env_sh=$(find "$dest" -mindepth 2 -maxdepth 2 -name env.sh | head -1)
    [[ -n $env_sh ]] || die "$bundle_arg holds no bundle (no */env.sh)"
    bundle=$(dirname "$env_sh")
  else
    [[ -f $bundle_arg/env.sh ]] || die "$bundle_arg is not a bundle from scripts/bundle_deps.sh (no env.sh)"
    bundle=$(realpath "$bundle_arg")
  fi
  host_ld=${LD_LIBRARY_PATH:-}
  # shellcheck disable=SC1091
  . "$bundle/env.sh"
  # The bundle's programs and the wrapper compilers set their own library path, and wxtrain is linked
  # with an RPATH into the bundle (below): the host's own tools (cmake, the compiler, python) keep
  # the host's libraries.
  # env.sh's ECCODES_DEFINITION_PATH and ECCODES_SAMPLES_PATH stay: ecCodes (data/readers' GRIB)
  # reads its definitions from the bundle in everything the check runs.
  LD_LIBRARY_PATH=$host_ld
  [[ -n $LD_LIBRARY_PATH ]] || unset LD_LIBRARY_PATH
  [[ -x $bundle/bin/grib_ls && -d $bundle/share/eccodes/definitions ]] ||
    die "the bundle $bundle has no ecCodes (made before data/readers needed it and the codecs): make it again with scripts/bundle_deps.sh"
  ncdump -h "$bundle/share/ncarg/data/cdf/Pstorm.cdf" >"$LOGS/bundle.log" 2>&1 && mpirun --version >>"$LOGS/bundle.log" 2>&1 &&
    grib_ls "$bundle/share/eccodes/samples/GRIB2.tmpl" >>"$LOGS/bundle.log" 2>&1 ||
    die "the bundle's programs do not run here ($(tail -1 "$LOGS/bundle.log")); the bundle needs $(sed -n 2p "$bundle/MANIFEST" | sed 's/^# host needs: //')"
  bundle_lib=$(dirname "$(ls "$bundle"/lib/*/libnetcdf.so.* | head -1)")  # lib/<multiarch>
  echo "gpu_check: dependencies from the bundle $bundle"
fi

# ---- 3. the storm configs, with their data paths pointed at the bundle when there is one
storm_dir=/usr/share/ncarg/data/cdf
data_dir=${bundle:+$bundle/share/ncarg/data/cdf}
data_dir=${data_dir:-$storm_dir}
[[ -f $data_dir/Pstorm.cdf ]] || die "no storm data in $data_dir (install libncarg-data or give --bundle)"
configs=()
for c in "$SRC"/configs/storm_*.toml; do
  grep -q '^\[\[data.sources\]\]' "$c" || continue  # estimate-only files do not train
  name=$(basename "$c" .toml)
  if [[ -n $names && ",$names," != *",$name,"* && ",$names," != *",${name#storm_},"* ]]; then continue; fi
  if [[ -z $names && $quick == 1 && $name == storm_vit_base ]]; then continue; fi
  sed "s|$storm_dir/|$data_dir/|g" "$c" >"$OUT/configs/$name.toml"
  configs+=("$OUT/configs/$name.toml")
done
[[ ${#configs[@]} -gt 0 ]] || die "no storm configs in configs/"
PRECISIONS=(fp32 bf16-mixed)
CHECKPOINTING=(off on)
BATCHES=1,2,4,8,16,32,64
FIT_GPUS=A10G,L4,A100-40,T4
FIT_PRECISIONS=(fp32 bf16-mixed)
TP_BATCHES=(8 64)
TP_STEPS=(--warmup 3 --steps 20 --reps 5)
TUNE_BUDGETS=(device 15GiB)
if [[ $quick == 1 ]]; then BATCHES=1,8,64 FIT_GPUS=T4,A100-40 FIT_PRECISIONS=(bf16-mixed) TP_BATCHES=(8); fi
if [[ $device == cpu ]]; then  # the plumbing test: cases a 2-core CPU runs in a few minutes
  PRECISIONS=(bf16-mixed) CHECKPOINTING=(off) BATCHES=1,2
  FIT_GPUS=64MiB FIT_PRECISIONS=(bf16-mixed) TP_BATCHES=(4) TP_STEPS=(--warmup 1 --steps 3 --reps 2)
  TUNE_BUDGETS=(64MiB)
fi
# (f) the presets, most valuable first: PRESET_CASES lines "preset|mode|precision|checkpointing|
# batches (--at)|--set values", PRESET_PEERS lines "preset|batch|--set values" (the peers do not
# checkpoint, so their comparisons run without). GraphCast's presets keep their edge blocks
# (model.edge_block = 2^18) in every case.
PRESET_CASES=(
  "graphcast-1.0|train|bf16-mixed|on|1|data.rollout_steps=1"
  "graphcast-1.0|train|bf16-mixed|on|1|data.rollout_steps=4"
  "fourcastnet-0.25|train|bf16-mixed|off|1,sure,max|"
  "pangu-0.25|train|bf16-mixed|on|1|"
  "graphcast-1.0|inference|bf16-mixed|off|1|"
  "fourcastnet-0.25|inference|bf16-mixed|off|1|"
  "pangu-0.25|inference|bf16-mixed|off|1|"
  "graphcast-1.0|train|bf16-mixed|off|1|data.rollout_steps=1"
  "graphcast-1.0|train|fp32|on|1|data.rollout_steps=1"
)
PRESET_PEERS=(
  "graphcast-1.0|1|data.rollout_steps=1"
  "fourcastnet-0.25|1|"
  "pangu-0.25|1|"
)
PEER_IMPLS=(pytorch pytorch-compile)
PRESET_STEPS=(--steps 4 --warmup 1)
PEER_STEPS=(--warmup 2 --steps 3 --reps 3)
PRESET_TIMEOUT=300
if [[ $device == cpu ]]; then  # toy sizes of the same presets: the stage's plumbing, in seconds
  toy_graphcast="data.grid=[10,20] model.latent=8 model.processor_layers=1 model.mesh_refinement=1 model.edge_block=64"
  toy_fourcastnet="data.grid=[16,32] model.embed_dim=16 model.depth=1"
  toy_pangu="data.grid=[8,16] model.embed_dim=8 model.stage_depths=[1,1,1,1] model.stage_heads=[1,2,2,1]"
  PRESET_CASES=(
    "graphcast-1.0|train|bf16-mixed|on|1|data.rollout_steps=2 $toy_graphcast"
    "fourcastnet-0.25|train|bf16-mixed|off|1,2|$toy_fourcastnet"
    "pangu-0.25|train|bf16-mixed|on|1|$toy_pangu"
    "graphcast-1.0|inference|bf16-mixed|off|1|$toy_graphcast"
  )
  PRESET_PEERS=("fourcastnet-0.25|1|$toy_fourcastnet")
  PRESET_STEPS=(--steps 2 --warmup 1) PEER_STEPS=(--warmup 1 --steps 2 --reps 1) PRESET_TIMEOUT=600
  # torch.compile (inductor, 2.11) fails on the CPU on the toy FourCastNet: its stride assertion on
  # aten._fft_r2c; the eager peer only here, the GPU stage runs both.
  PEER_IMPLS=(pytorch)
fi

GPU_CHECK=$BUILD/bench/gpu_check
WXTRAIN=$BUILD/cli/wxtrain
need_binaries() {
  [[ -x $GPU_CHECK && -x $WXTRAIN ]] && return 0
  echo "gpu_check.sh: no $GPU_CHECK or $WXTRAIN: run the build stage first (--only build)" >&2
  pyjson "$PARTS/errors.jsonl" kind=error stage="${FUNCNAME[1]#stage_}" what="no build" exit=1 log=""
  return 1
}

# ---- stages
stage_build() {
  echo "== build ($BUILD, against $torch_prefix)"
  local t0=$SECONDS gen=() flags=()
  if command -v ninja >/dev/null && [[ ! -f $BUILD/Makefile ]]; then gen=(-G Ninja); fi
  flags=(-DCMAKE_BUILD_TYPE=Release "-DCMAKE_PREFIX_PATH=$torch_prefix${bundle:+;$bundle}" "-DTorch_DIR=$torch_prefix/Torch"
         "-DWXTRAIN_TEST_COMPONENTS=${WXTRAIN_TEST_COMPONENTS:-cuda;autotune}")
  if [[ -n $bundle ]]; then
    # No LD_LIBRARY_PATH for the host's tools, so: the linker finds what the bundle's libraries load
    # there (-rpath-link), and the executables carry an RPATH into the bundle, an RPATH rather than a
    # RUNPATH (--disable-new-dtags) so that it also serves the libraries they load (libnetcdf ->
    # libhdf5; OpenMPI's own RUNPATHs point into the bundle, scripts/bundle_deps.sh).
    flags+=("-DMPI_C_COMPILER=$bundle/bin/mpicc" "-DMPIEXEC_EXECUTABLE=$bundle/bin/mpiexec"
            "-DCMAKE_EXE_LINKER_FLAGS=-Wl,--disable-new-dtags -Wl,-rpath-link,$bundle_lib"
            "-DCMAKE_BUILD_RPATH=$bundle_lib")
  fi
  if [[ ! -x /usr/local/cuda/bin/nvcc ]] && command -v nvcc >/dev/null; then
    flags+=("-DCMAKE_CUDA_COMPILER=$(command -v nvcc)")
  fi
  local rc=0
  { cmake -S "$SRC" -B "$BUILD" "${gen[@]}" "${flags[@]}" && cmake --build "$BUILD" -j"$jobs"; } >"$LOGS/build.log" 2>&1 || rc=$?
  grep -E '^-- wxtrain:' "$LOGS/build.log" || true
  pyjson "$PARTS/build.jsonl" kind=build exit=$rc seconds=$((SECONDS - t0)) torch="$torch_version" torch_prefix="$torch_prefix" \
    bundle="${bundle:-system packages}" generator="${gen[*]:-default}"
  if [[ $rc != 0 ]]; then
    tail -30 "$LOGS/build.log" >&2
    record_error build "configure and build" $rc "$LOGS/build.log"
    return 1
  fi
  echo "  built in $((SECONDS - t0)) s"
}

# set_args "a=1 b=2": --set a=1 --set b=2, into the array set_list
set_args() {
  set_list=()
  local kv
  for kv in $1; do set_list+=(--set "$kv"); done
}

stage_presets() {
  echo "== (f) the presets at their real grids: ${#PRESET_CASES[@]} memory cases, ${#PRESET_PEERS[@]} throughput comparisons"
  need_binaries || return 1
  local line preset mode p k at sets rc log name
  for line in "${PRESET_CASES[@]}"; do
    IFS='|' read -r preset mode p k at sets <<<"$line"
    set_args "$sets"
    name="$preset-$mode-$p-ckpt$k-$(echo "${sets%% *}" | tr -c 'A-Za-z0-9.=\n' '_')"
    log="$LOGS/presets-$name.log"
    rc=0
    # Each case's line is written as soon as it is measured: a machine lost midway keeps the others.
    timeout "$PRESET_TIMEOUT" "$GPU_CHECK" preset --device "$device" --preset "$preset" --mode "$mode" --precision "$p" \
      --checkpointing "$k" --at "$at" "${set_list[@]}" "${PRESET_STEPS[@]}" >>"$PARTS/presets.jsonl" 2>"$log" || rc=$?
    if [[ $rc != 0 ]]; then record_error presets "$preset $mode $p checkpointing $k at $at ${sets:-}" $rc "$log"; fi
    echo "  $preset $mode $p checkpointing $k ${sets:+($sets) }done"
  done
  local b shape buffers peer_cfg impl round=0 runs
  for line in "${PRESET_PEERS[@]}"; do
    IFS='|' read -r preset b sets <<<"$line"
    set_args "$sets"
    name="$preset-b$b"
    shape="$PARTS/shape-preset-$name.json" buffers="$PARTS/buffers-preset-$name" peer_cfg="$PARTS/peer-$name.toml"
    mkdir -p "$buffers"
    "$GPU_CHECK" describe --device "$device" --preset "$preset" "${set_list[@]}" --buffers "$buffers" >"$shape" \
      2>"$LOGS/describe-preset-$name.log" || { record_error presets "describe $preset" $? "$LOGS/describe-preset-$name.log"; continue; }
    # The peer's run file: the preset's [model] keys with this case's model.* values, and the
    # optimizer's settings (train_peer.py reads [model] and [train]).
    "$PY" - "$shape" "$peer_cfg" $sets <<'EOF'
import json, sys
shape, out, sets = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3:]
model = {}
for line in shape["preset_model_toml"].splitlines():
    if "=" in line:
        k, v = line.split("=", 1)
        model[k.strip()] = v.strip()
for kv in sets:
    k, v = kv.split("=", 1)
    if k.startswith("model."):
        model[k[len("model."):]] = v
with open(out, "w") as f:
    f.write("[model]\n" + "".join(f"{k} = {v}\n" for k, v in model.items()))
    f.write("[train]\nlr = 1e-4\nweight_decay = 0.01\ngrad_clip = 1.0\nseed = 0\n")
EOF
    # wxtrain, eager PyTorch and torch.compile, the order rotating so that drift hits them alike.
    runs=(wxtrain "${PEER_IMPLS[@]}")
    for ((i = 0; i < round % ${#runs[@]}; i++)); do runs=("${runs[@]:1}" "${runs[0]}"); done
    round=$((round + 1))
    for impl in "${runs[@]}"; do
      log="$LOGS/presets-throughput-$name-$impl.log"
      rc=0
      if [[ $impl == wxtrain ]]; then
        timeout "$PRESET_TIMEOUT" "$GPU_CHECK" throughput --device "$device" --preset "$preset" "${set_list[@]}" \
          --precision bf16-mixed --batch "$b" "${PEER_STEPS[@]}" >"$log.out" 2>"$log" || rc=$?
      else
        local compile=()
        if [[ $impl == pytorch-compile ]]; then compile=(--compile); fi
        timeout "$PRESET_TIMEOUT" "$PY" "$SRC/bench/peer/train_peer.py" --config "$peer_cfg" --shape "$shape" --buffers "$buffers" \
          --precision bf16-mixed --batch "$b" --device "$device" "${PEER_STEPS[@]}" "${compile[@]}" >"$log.out" 2>"$log" || rc=$?
      fi
      if [[ $rc != 0 ]]; then
        record_error presets "throughput $impl $preset batch $b" $rc "$log"
      else
        grep 'samples_per_s=' "$log.out" | sed "s/^/config=$preset /" >>"$PARTS/presets_throughput.txt"
      fi
    done
    echo "  $preset throughput (wxtrain, PyTorch eager, torch.compile) done"
  done
}

stage_ctest() {
  echo "== (a) ctest -L cuda"
  need_binaries || return 1
  local rc=0 listed failed skipped
  listed=$(cd "$BUILD" && ctest -N -L cuda 2>&1 | sed -n 's/^Total Tests: //p')
  # -V: each test's output, where GoogleTest says which tests skipped themselves (CTest counts them
  # as passed); on a GPU none of the cuda tests should.
  (cd "$BUILD" && ctest -V -L cuda --timeout 600) >"$LOGS/ctest.log" 2>&1 || rc=$?
  failed=$(sed -nE 's/^[[:space:]]*[0-9]+ - (.*) \((Failed|Not Run|Timeout|SEGFAULT|Subprocess aborted|Exception|Child aborted|[A-Za-z ]*[Ee]rror[A-Za-z ]*)\)$/\1/p' \
    "$LOGS/ctest.log" | sort -u | paste -sd, -)
  skipped=$({ sed -nE 's/^[0-9]+: \[  SKIPPED \] ([A-Za-z0-9_./]+) \([0-9]+ ms\)$/\1/p' "$LOGS/ctest.log"
              sed -nE 's/^[[:space:]]*[0-9]+ - (.*) \(Skipped\)$/\1/p' "$LOGS/ctest.log"; } | sort -u | paste -sd, -)
  grep -E '^(Total Test time|[0-9]+% tests passed)' "$LOGS/ctest.log" || tail -3 "$LOGS/ctest.log"
  pyjson "$PARTS/ctest.jsonl" kind=ctest label=cuda tests="${listed:-0}" exit=$rc failed="$failed" skipped="$skipped" \
    log="$LOGS/ctest.log"
}

stage_accuracy() {
  echo "== (b) estimator accuracy: ${#configs[@]} configs x ${PRECISIONS[*]} x checkpointing ${CHECKPOINTING[*]} x batches $BATCHES"
  need_binaries || return 1
  local c p k rc log
  for c in "${configs[@]}"; do
    for p in "${PRECISIONS[@]}"; do
      for k in "${CHECKPOINTING[@]}"; do
        log="$LOGS/accuracy-$(basename "$c" .toml)-$p-$k.log"
        rc=0
        "$GPU_CHECK" accuracy --device "$device" --config "$c" --precision "$p" --checkpointing "$k" --batches "$BATCHES" \
          >>"$PARTS/accuracy.jsonl" 2>"$log" || rc=$?
        if [[ $rc != 0 ]]; then record_error accuracy "$(basename "$c") $p checkpointing $k" $rc "$log"; fi
      done
      echo "  $(basename "$c" .toml) $p done"
    done
  done
}

stage_fit() {
  echo "== (c) largest batch on smaller GPUs ($FIT_GPUS), ${FIT_PRECISIONS[*]}"
  need_binaries || return 1
  local c p rc log
  for c in "${configs[@]}"; do
    for p in "${FIT_PRECISIONS[@]}"; do
      log="$LOGS/fit-$(basename "$c" .toml)-$p.log"
      rc=0
      "$GPU_CHECK" fit --device "$device" --config "$c" --precision "$p" --gpus "$FIT_GPUS" >>"$PARTS/fit.jsonl" 2>"$log" || rc=$?
      if [[ $rc != 0 ]]; then record_error fit "$(basename "$c") $p" $rc "$log"; fi
      echo "  $(basename "$c" .toml) $p done"
    done
  done
}

stage_tune() {
  echo "== (d) wxtrain tune-batch on the GPU (budgets: ${TUNE_BUDGETS[*]})"
  need_binaries || return 1
  local c name budget rc out
  mkdir -p "$PARTS/tune"
  for c in "${configs[@]}"; do
    name=$(basename "$c" .toml)
    for budget in "${TUNE_BUDGETS[@]}"; do
      out="$PARTS/tune/$name-$budget"
      rc=0
      local extra=()
      if [[ $budget != device ]]; then extra=(--memory-limit "$budget"); fi
      # The CPU plumbing run emulates a small device budget for the tensors alone: the process's
      # own ~500 MiB outside the allocator (estimator/cpu_overhead.h) would not fit 64 MiB.
      if [[ $device == cpu ]]; then extra+=(--tensors-only); fi
      "$WXTRAIN" tune-batch --config "$c" --set train.device="$device" "${extra[@]}" --json >"$out.json" 2>"$out.log" || rc=$?
      echo "$rc" >"$out.rc"
      if [[ $rc != 0 ]]; then record_error tune "$name budget $budget" $rc "$out.log"; fi
    done
    echo "  $name done"
  done
}

stage_throughput() {
  echo "== (e) samples/s: wxtrain vs PyTorch (bench/peer/train_peer.py --device $device), batches ${TP_BATCHES[*]}"
  need_binaries || return 1
  local c name p b rc log shape buffers round=0 runs
  : >"$PARTS/throughput.txt"
  for c in "${configs[@]}"; do
    name=$(basename "$c" .toml)
    shape="$PARTS/shape-$name.json"
    buffers="$PARTS/buffers-$name"  # graphcast's graph, pangu's tables: the peer runs on the same ones
    mkdir -p "$buffers"
    "$GPU_CHECK" describe --device "$device" --config "$c" --buffers "$buffers" >"$shape" 2>"$LOGS/describe-$name.log" ||
      { record_error throughput "describe $name" $? "$LOGS/describe-$name.log"; continue; }
    for p in "${PRECISIONS[@]}"; do
      for b in "${TP_BATCHES[@]}"; do
        # wxtrain then PyTorch, the other way round every other case, so drift hits both alike.
        runs=(wxtrain pytorch)
        if ((round++ % 2 == 1)); then runs=(pytorch wxtrain); fi
        for impl in "${runs[@]}"; do
          log="$LOGS/throughput-$name-$p-$b-$impl.log"
          rc=0
          if [[ $impl == wxtrain ]]; then
            "$GPU_CHECK" throughput --device "$device" --config "$c" --precision "$p" --batch "$b" "${TP_STEPS[@]}" \
              >"$log.out" 2>"$log" || rc=$?
          else
            "$PY" "$SRC/bench/peer/train_peer.py" --config "$c" --shape "$shape" --buffers "$buffers" \
              --precision "$p" --batch "$b" --device "$device" "${TP_STEPS[@]}" >"$log.out" 2>"$log" || rc=$?
          fi
          if [[ $rc != 0 ]]; then
            record_error throughput "$impl $name $p batch $b" $rc "$log"
          else
            sed "s/^/config=$name /" "$log.out" | grep 'samples_per_s=' >>"$PARTS/throughput.txt"
          fi
        done
      done
    done
    echo "  $name done"
  done
}

# A stage run again replaces its earlier results (and errors) in parts/.
reset_stage() {
  case $1 in
    build | ctest) rm -f "$PARTS/$1.jsonl" ;;
    accuracy | fit) rm -f "$PARTS/$1.jsonl" ;;
    presets) rm -f "$PARTS/presets.jsonl" "$PARTS/presets_throughput.txt" ;;
    tune) rm -rf "$PARTS/tune" ;;
    throughput) rm -f "$PARTS/throughput.txt" "$PARTS"/shape-*.json ;;
  esac
  if [[ -f $PARTS/errors.jsonl ]]; then
    "$PY" - "$PARTS/errors.jsonl" "$1" <<'EOF'
import json, sys
path, stage = sys.argv[1], sys.argv[2]
kept = [l for l in open(path) if l.strip() and json.loads(l).get("stage") != stage]
open(path, "w").writelines(kept)
EOF
  fi
}

status=0
for s in "${stages[@]}"; do
  reset_stage "$s"
  "stage_$s" || { status=1; [[ $s == build ]] && break; }
done
# The device as the check's own binary sees it (else as torch does), for the report's heading.
if [[ -x $GPU_CHECK ]] && "$GPU_CHECK" device --device "$device" >"$PARTS/device.json.new" 2>"$LOGS/device.log"; then
  mv "$PARTS/device.json.new" "$PARTS/device.json"
elif [[ ! -f $PARTS/device.json && $device == cuda ]]; then
  "$PY" -c 'import json, torch; p = torch.cuda.get_device_properties(0)
print(json.dumps({"kind": "device", "name": p.name, "total_bytes": p.total_memory, "torch": torch.__version__,
                  "cuda_runtime": torch.version.cuda}))' >"$PARTS/device.json" 2>>"$LOGS/device.log" || rm -f "$PARTS/device.json"
fi
rm -f "$PARTS/device.json.new"

# ---- the report (from everything in parts/, this run's stages and earlier ones)
"$PY" - "$OUT" "$status" "$device" <<'EOF'
import datetime, glob, json, os, statistics, subprocess, sys

out, status, on = sys.argv[1], int(sys.argv[2]), sys.argv[3]
parts = os.path.join(out, "parts")


def lines(name):
    path = os.path.join(parts, name)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip()]


MiB = 1024 * 1024
device = (lines("device.json") or [None])[-1]
errors = lines("errors.jsonl") or []
verdicts = {}   # stage -> (PASS|FAIL|WARN|NOT RUN, one line)
md = []
report = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "device": device,
          "errors": errors, "targets": {"median_abs_error": 0.03, "worst_abs_error": 0.08, "predicted_fits_that_oom": 0}}
try:
    report["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                      timeout=10).stdout.strip() or None
except Exception:
    report["commit"] = None


def stage_errors(stage):
    return [e for e in errors if e.get("stage") == stage]


# build
build = lines("build.jsonl")
if build is None:
    verdicts["build"] = ("NOT RUN", "")
else:
    b = build[-1]
    report["build"] = b
    verdicts["build"] = ("PASS", f"{b['seconds']} s against torch {b['torch']}, dependencies: {b['bundle']}") if b["exit"] == 0 \
        else ("FAIL", f"exit {b['exit']}, see logs/build.log")

# (a) ctest -L cuda
ct = lines("ctest.jsonl")
if ct is None:
    verdicts["ctest"] = ("NOT RUN", "")
else:
    c = ct[-1]
    report["ctest"] = c
    skipped = [t for t in str(c.get("skipped") or "").split(",") if t]
    if int(c["tests"] or 0) == 0:
        verdicts["ctest"] = ("WARN", "no CTest test carries the label cuda")
    elif c["exit"] == 0 and skipped and on == "cuda":
        verdicts["ctest"] = ("WARN", f"{c['tests']} tests passed, but these skipped themselves on a GPU: {', '.join(skipped)}")
    elif c["exit"] == 0:
        verdicts["ctest"] = ("PASS", f"{c['tests']} tests passed" + (f" ({len(skipped)} skipped)" if skipped else ""))
    else:
        verdicts["ctest"] = ("FAIL", f"{c['tests']} tests, failed: {c['failed'] or 'see logs/ctest.log'}")

# (b) estimator accuracy
acc = lines("accuracy.jsonl")
if acc is None and not stage_errors("accuracy"):
    verdicts["accuracy"] = ("NOT RUN", "")
else:
    acc = acc or []
    ok = [a for a in acc if "error_total" in a]
    oom = [a for a in acc if a["measured"]["oom"]]
    errs = sorted(abs(a["error_total"]) for a in ok)
    med = statistics.median(errs) if errs else None
    worst = max(ok, key=lambda a: abs(a["error_total"])) if ok else None
    summary = {"cases": len(ok), "oom_cases": len(oom), "median_abs_error": med,
               "worst_abs_error": abs(worst["error_total"]) if worst else None,
               "worst_case": {k: worst[k] for k in ("model", "precision", "checkpointing", "batch")} if worst else None,
               "worst_under_estimate": min((a["error_total"] for a in ok), default=None),
               "median_abs_error_allocated": statistics.median(sorted(abs(a["error_allocated"]) for a in ok)) if ok else None}
    report["accuracy"] = {"summary": summary, "cases": acc}
    passed = ok and not oom and not stage_errors("accuracy") and med <= 0.03 and summary["worst_abs_error"] <= 0.08
    line = (f"{len(ok)} cases, median |error| {100 * med:.2f}% (target <= 3%), worst {100 * summary['worst_abs_error']:.2f}% "
            f"(target <= 8%: {worst['model']} {worst['precision']} checkpointing {'on' if worst['checkpointing'] else 'off'} "
            f"batch {worst['batch']})") if ok else "no case measured"
    if oom:
        line += f"; {len(oom)} cases ran out of memory"
    if stage_errors("accuracy"):
        line += f"; {len(stage_errors('accuracy'))} runs failed"
    if on == "cpu":  # the plumbing test: the targets are for a GPU
        passed = bool(ok) and not stage_errors("accuracy")
    verdicts["accuracy"] = ("RAN" if on == "cpu" and passed else "PASS" if passed else "FAIL", line)

# (c) fits on smaller GPUs
fit = lines("fit.jsonl")
if fit is None and not stage_errors("fit"):
    verdicts["fit"] = ("NOT RUN", "")
else:
    fit = fit or []
    checked = [f for f in fit if "real_max" in f]
    bad = [f for f in checked if f["predicted_fit_ooms"]]
    unsure = [f for f in checked if f.get("sure_fit_ooms")]  # the batch the estimate is sure of (error_band.h)
    report["fit"] = {"cases": fit, "predicted_fits_that_oom": len(bad)}
    line = f"{len(checked)} (config, precision, GPU) cases, {len(bad)} predicted fits that run out of memory"
    if bad:
        line += ": " + ", ".join(f"{f['model']} {f['precision']} {f['gpu']} (predicted {f['predicted_max']}, real {f['real_max']})"
                                 for f in bad)
    if unsure:
        line += f"; {len(unsure)} where even the batch the estimate is sure of does: " + ", ".join(
            f"{f['model']} {f['precision']} {f['gpu']} (sure of {f['sure_max']}, real {f['real_max']})" for f in unsure)
    if stage_errors("fit"):
        line += f"; {len(stage_errors('fit'))} runs failed"
    fine = checked and not stage_errors("fit")
    verdicts["fit"] = ("RAN" if on == "cpu" and fine else "PASS" if fine and not bad else "FAIL", line)

# (d) tune-batch
tune_files = sorted(glob.glob(os.path.join(parts, "tune", "*.rc")))
if not tune_files:
    verdicts["tune"] = ("NOT RUN", "")
else:
    tunes = []
    for rc_file in tune_files:
        base = rc_file[:-3]
        rc = int(open(rc_file).read().strip() or 1)
        t = {"run": os.path.basename(base), "exit": rc}
        if rc == 0:
            try:
                t["report"] = json.load(open(base + ".json"))
            except ValueError:
                t["exit"] = "unreadable JSON"
        tunes.append(t)
    report["tune"] = tunes
    failed = [t for t in tunes if t["exit"] != 0]
    verdicts["tune"] = ("PASS" if not failed else "FAIL",
                        f"{len(tunes)} runs" + (f", failed: {', '.join(t['run'] for t in failed)}" if failed else ""))

# (e) throughput
tp_path = os.path.join(parts, "throughput.txt")
if not os.path.exists(tp_path) and not stage_errors("throughput"):
    verdicts["throughput"] = ("NOT RUN", "")
else:
    rows = {}
    if os.path.exists(tp_path):
        for l in open(tp_path):
            kv = dict(f.split("=", 1) for f in l.split() if "=" in f)
            rows.setdefault((kv["config"], kv["precision"], int(kv["batch"])), {})[kv["impl"]] = float(kv["samples_per_s"])
    table = [{"config": c, "precision": p, "batch": b, "wxtrain": r.get("wxtrain"), "pytorch": r.get("pytorch"),
              "ratio": r["wxtrain"] / r["pytorch"] if r.get("wxtrain") and r.get("pytorch") else None}
             for (c, p, b), r in sorted(rows.items())]
    report["throughput"] = table
    ratios = [t["ratio"] for t in table if t["ratio"]]
    n_err = len(stage_errors("throughput"))
    verdicts["throughput"] = ("PASS" if ratios and not n_err else "FAIL",
                              (f"wxtrain / PyTorch samples/s: median {statistics.median(ratios):.2f}x, "
                               f"range {min(ratios):.2f}-{max(ratios):.2f}x over {len(ratios)} cases" if ratios else "nothing measured")
                              + (f"; {n_err} runs failed" if n_err else ""))

# (f) the presets at their real grids
pre = lines("presets.jsonl")
pre_tp_path = os.path.join(parts, "presets_throughput.txt")
if pre is None and not stage_errors("presets") and not os.path.exists(pre_tp_path):
    verdicts["presets"] = ("NOT RUN", "")
else:
    pre = pre or []
    ran = [c for c in pre if "measured" in c]
    # A batch the estimate promised (1, the one it is sure of, its largest) that ran out of memory.
    broken = [c for c in ran if c["measured"]["oom"]]
    errs = [abs(c["error_total"]) for c in ran if c.get("error_total") is not None]
    rows = {}
    if os.path.exists(pre_tp_path):
        for l in open(pre_tp_path):
            kv = dict(f.split("=", 1) for f in l.split() if "=" in f)
            rows.setdefault((kv["config"], int(kv["batch"])), {})[kv["impl"]] = float(kv["samples_per_s"])
    tp = [{"preset": c, "batch": b, **r} for (c, b), r in sorted(rows.items())]
    report["presets"] = {"cases": pre, "throughput": tp}
    line = f"{len(ran)} cases measured"
    if errs:
        line += f", |error| of the total: median {100 * statistics.median(errs):.1f}%, worst {100 * max(errs):.1f}%"
    if broken:
        line += "; ran out of memory at an estimated fit: " + ", ".join(
            f"{c['preset']} {c['mode']} batch {c['batch']} ({c['at']})" for c in broken)
    n_err = len(stage_errors("presets"))
    if n_err:
        line += f"; {n_err} runs failed"
    fine = ran and not n_err
    verdicts["presets"] = ("RAN" if on == "cpu" and fine else "PASS" if fine and not broken else "FAIL", line)

order = ["build", "presets", "ctest", "accuracy", "fit", "tune", "throughput"]
names = {"build": "build", "presets": "(f) presets at their real grids", "ctest": "(a) ctest -L cuda", "accuracy": "(b) estimator vs measured memory",
         "fit": "(c) largest batch on smaller GPUs", "tune": "(d) tune-batch on the GPU", "throughput": "(e) samples/s vs PyTorch"}
failed = [s for s in order if verdicts[s][0] == "FAIL"]
missing = [s for s in order if verdicts[s][0] == "NOT RUN"]
verdict = "FAIL" if failed or status else ("PASS" if not missing else "INCOMPLETE")
report["verdict"] = verdict
report["stages"] = {s: {"result": verdicts[s][0], "detail": verdicts[s][1]} for s in order}

dev = f"{device['name']} ({device['total_bytes'] / 2**30:.1f} GiB, CUDA runtime {device.get('cuda_runtime')}, driver " \
      f"{device.get('cuda_driver')}, torch {device['torch']})" if device else "unknown device"
report["device_kind"] = on
if on == "cpu":
    md += ["**A test of the check's plumbing on the CPU (--device cpu): no GPU was checked and the numbers mean nothing.**", ""]
md += [f"# wxtrain GPU check: {verdict}", "",
       f"{dev}; commit {report['commit'] or 'unknown'}; {report['date']}", "",
       "| check | result | detail |", "|---|---|---|"]
md += [f"| {names[s]} | {verdicts[s][0]} | {verdicts[s][1].replace('|', chr(92) + '|')} |" for s in order]
if missing and verdict != "FAIL":
    md += ["", f"Not run yet: {', '.join(missing)} (`scripts/gpu_check.sh --only {','.join(missing)}` adds them)."]

if report.get("presets", {}).get("cases"):
    md += ["", "## (f) The presets at their real grids", "",
           "Predicted: `wxtrain estimate`'s per-rank total for this GPU (analytic formulas where a trace would be too "
           "large). Measured: peak reserved + CUDA context of real steps (training steps, or forward passes under "
           "no_grad for inference), from an emptied cache; samples/s of the steps after the first. MiB.", "",
           "| preset | mode | precision | ckpt | set | batch | predicted total | measured total | error | "
           "predicted allocated | peak allocated | peak reserved | context | samples/s |",
           "|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for c in report["presets"]["cases"]:
        sets = " ".join(o for o in c.get("overrides", []) if not o.startswith(("train.precision", "train.checkpointing", "train.device")))
        if "measured" not in c:
            md.append(f"| {c['preset']} | {c['mode']} | {c['precision']} | {'on' if c['checkpointing'] else 'off'} | {sets} | "
                      f"{c['at']} | | | skipped: {c.get('skipped', '')} | | | | | |")
            continue
        p, m = c["predicted"], c["measured"]
        err = f"{100 * c['error_total']:+.1f}%" if c.get("error_total") is not None else "OOM" if m["oom"] else "-"
        md.append(f"| {c['preset']} | {c['mode']} | {c['precision']} | {'on' if c['checkpointing'] else 'off'} | {sets} | "
                  f"{c['batch']} ({c['at']}) | {p['total'] / MiB:.0f} | {m['total'] / MiB:.0f} | {err} | "
                  f"{p['allocated'] / MiB:.0f} | {m['peak_allocated'] / MiB:.0f} | {m['peak_reserved'] / MiB:.0f} | "
                  f"{m['context'] / MiB:.0f} | {m['samples_per_s']:.2f} |")
    if report["presets"]["throughput"]:
        md += ["", "Training samples/s, bf16-mixed, no checkpointing (the peers do not checkpoint): wxtrain against "
               "bench/peer/train_peer.py --device cuda, eager and torch.compile.", "",
               "| preset | batch | wxtrain | PyTorch eager | torch.compile | wxtrain / eager | wxtrain / compile |",
               "|---|---:|---:|---:|---:|---:|---:|"]
        for t in report["presets"]["throughput"]:
            w, e, k = t.get("wxtrain"), t.get("pytorch"), t.get("pytorch-compile")
            f = lambda v: f"{v:.2f}" if v else "-"
            r = lambda a, b: f"{a / b:.2f}x" if a and b else "-"
            md.append(f"| {t['preset']} | {t['batch']} | {f(w)} | {f(e)} | {f(k)} | {r(w, e)} | {r(w, k)} |")

if report.get("accuracy", {}).get("cases"):
    md += ["", "## (b) Estimator vs measured GPU memory", "",
           "Predicted: `wxtrain estimate`'s per-rank total for this GPU (model states + traced activations + GPU "
           "overhead). Measured: the caching allocator's peak reserved bytes + the CUDA context (cudaMemGetInfo's "
           "total - free, less reserved), on real training steps from an emptied cache. MiB.", "",
           "| model | precision | ckpt | batch | predicted total | measured total | error | predicted allocated | "
           "peak allocated | peak reserved | context (predicted) |",
           "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for a in report["accuracy"]["cases"]:
        p, m = a["predicted"], a["measured"]
        err = f"{100 * a['error_total']:+.2f}%" if "error_total" in a else "OOM"
        md.append(f"| {a['model']} | {a['precision']} | {'on' if a['checkpointing'] else 'off'} | {a['batch']} | "
                  f"{p['total'] / MiB:.1f} | {m['total'] / MiB:.1f} | {err} | {p['allocated'] / MiB:.1f} | "
                  f"{m['peak_allocated'] / MiB:.1f} | {m['peak_reserved'] / MiB:.1f} | "
                  f"{m['context'] / MiB:.0f} ({p['overhead']['cuda_context'] / MiB:.0f}) |")
    s = report["accuracy"]["summary"]
    if s["cases"]:
        md += ["", f"median |error| {100 * s['median_abs_error']:.2f}%, worst {100 * s['worst_abs_error']:.2f}%, "
                   f"worst under-estimate {100 * s['worst_under_estimate']:+.2f}%; allocated alone: median |error| "
                   f"{100 * s['median_abs_error_allocated']:.2f}%"]

if report.get("fit", {}).get("cases"):
    md += ["", "## (c) Largest batch on smaller GPUs", "",
           "The estimate's largest batch for the GPU against the largest that trains with the caching allocator capped to "
           "the GPU's memory less this device's measured CUDA context (exact search; probes in the JSON).", "",
           "| model | precision | GPU | cap MiB | sure of | predicted | real | predicted/real | verdict |",
           "|---|---|---|---:|---:|---:|---:|---:|---|"]
    for f in report["fit"]["cases"]:
        if "skipped" in f:
            md.append(f"| {f['model']} | {f['precision']} | {f['gpu']} | | | | | | skipped: {f['skipped']} |")
            continue
        ratio = f"{f['predicted_max'] / f['real_max']:.2f}" if f["real_max"] else "-"
        md.append(f"| {f['model']} | {f['precision']} | {f['gpu']} | {f['cap'] / MiB:.0f} | {f.get('sure_max', '-')} | {f['predicted_max']} | "
                  f"{f['real_max']}{'+' if f['real_max'] >= f['max_batch_bound'] else ''} | {ratio} | "
                  f"{'PREDICTED FIT RUNS OUT OF MEMORY' if f['predicted_fit_ooms'] else 'ok'} |")

if report.get("tune"):
    md += ["", "## (d) tune-batch on the GPU", "", "| run | budget GiB | estimated | probes (batch: result) | result | seconds |",
           "|---|---:|---:|---|---:|---:|"]
    for t in report["tune"]:
        r = t.get("report")
        if not r:
            md.append(f"| {t['run']} | | | | exit {t['exit']} | |")
            continue
        probes = ", ".join(f"{p['batch']}: {p['result']}" for p in r["probes"])
        md.append(f"| {t['run']} | {r['budget_bytes'] / 2**30:.2f} | {r['estimated_batch']} | {probes} | {r['batch']} | "
                  f"{r['seconds']:.1f} |")

if report.get("throughput"):
    md += ["", "## (e) Training samples/s on the GPU", "",
           "Synthetic batches, median of 5 repetitions of 20 steps after 3 warm-up steps; the peer is "
           "bench/peer/train_peer.py --device cuda (AdamW at PyTorch's defaults).", "",
           "| config | precision | batch | wxtrain | PyTorch | wxtrain / PyTorch |", "|---|---|---:|---:|---:|---:|"]
    for t in report["throughput"]:
        f = lambda v: f"{v:.1f}" if v else "-"
        md.append(f"| {t['config']} | {t['precision']} | {t['batch']} | {f(t['wxtrain'])} | {f(t['pytorch'])} | "
                  f"{t['ratio']:.2f}x |" if t["ratio"] else f"| {t['config']} | {t['precision']} | {t['batch']} | "
                  f"{f(t['wxtrain'])} | {f(t['pytorch'])} | - |")

if errors:
    md += ["", "## Errors", ""]
    for e in errors:
        md += [f"- {e['stage']}: {e['what']} (exit {e['exit']}, {e['log']})", "", "```", str(e.get("tail", "")).strip()[-800:], "```"]

with open(os.path.join(out, "report.md"), "w") as f:
    f.write("\n".join(md) + "\n")
with open(os.path.join(out, "report.json"), "w") as f:
    json.dump(report, f, indent=1)
print("\n".join(md[:next((i for i, l in enumerate(md) if l.startswith("## ")), len(md))]).rstrip())
print(f"\nreport: {os.path.join(out, 'report.md')} and report.json")
sys.exit(1 if verdict == "FAIL" else 0)
EOF
