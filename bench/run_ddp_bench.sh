#!/bin/bash
# Two-rank data-parallel training: wxtrain (bench/ddp_step.cpp, the real TrainingStep with
# ZeroDataParallel under mpirun) vs PyTorch DDP with Gloo (bench/peer/ddp_peer.py), the share of the
# allreduce hidden behind backward, and comm_bandwidth repeated. Contenders alternate round by
# round on the same machine; every figure is a median.
#
#   bench/run_ddp_bench.sh [BUILD_DIR=build-mpi] [ROUNDS=5]
#   env: CONFIG (configs/storm_unet.toml) PRECISION (fp32) BATCH (8 per rank) THREADS (1 per rank)
#        BW_ROUNDS (5) SKIP_BW=1 to leave out comm_bandwidth
# Needs targets ddp_step and comm_bandwidth built in BUILD_DIR, and .venv/bin/python with torch (scripts/install_deps.sh).
set -eu
cd "$(dirname "$0")/.."
build="${1:-build-mpi}"
rounds="${2:-5}"
config="${CONFIG:-configs/storm_unet.toml}"
precision="${PRECISION:-fp32}"
batch="${BATCH:-8}"
threads="${THREADS:-1}"
bw_rounds="${BW_ROUNDS:-5}"
mpirun_cmd=(mpirun -np 2 --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS="$threads")
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

median() { sort -g | awk '{v[NR]=$1} END {if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }
field() { grep -o "$1=[^ ]*" | head -1 | cut -d= -f2; }

OMP_NUM_THREADS="$threads" "$build/bench/ddp_step" --config "$config" --describe > "$tmp/desc.json"
echo "model: $(cat "$tmp/desc.json" | cut -c1-160)..."
echo "config $config, precision $precision, batch $batch per rank, $threads thread(s) per rank, 2 ranks, $rounds rounds"
echo

common=(--batch "$batch" --precision "$precision" --warmup 3 --steps 10 --reps 3)
for r in $(seq "$rounds"); do
  "${mpirun_cmd[@]}" "$build/bench/ddp_step" --config "$config" "${common[@]}" >> "$tmp/wx.txt"
  # OMP_NUM_THREADS for the peer too, so that every pool (ATen's, MKL's, oneDNN's) of each peer
  # rank is sized as wxtrain's are.
  OMP_NUM_THREADS="$threads" "${PY:-.venv/bin/python}" bench/peer/ddp_peer.py --describe "$tmp/desc.json" --ranks 2 --threads "$threads" \
      "${common[@]}" >> "$tmp/py.txt"
  echo "round $r: wxtrain $(tail -1 "$tmp/wx.txt" | field step_ms) ms, pytorch-ddp $(tail -1 "$tmp/py.txt" | field step_ms) ms" >&2
done
wx=$(grep -o "step_ms=[0-9.]*" "$tmp/wx.txt" | cut -d= -f2 | median)
py=$(grep -o "step_ms=[0-9.]*" "$tmp/py.txt" | cut -d= -f2 | median)
params_wx=$(head -1 "$tmp/wx.txt" | field params)
params_py=$(head -1 "$tmp/py.txt" | field params)
buckets=$(head -1 "$tmp/wx.txt" | field buckets)
echo "| implementation | ranks | params | batch/rank | threads/rank | step time (median of $rounds rounds) | samples/s (global) |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
printf "| wxtrain TrainingStep + ZeroDataParallel (MPI, %s bucket(s)) | 2 | %s | %s | %s | %.1f ms | %.1f |\n" \
  "$buckets" "$params_wx" "$batch" "$threads" "$wx" "$(echo "2*$batch*1000/$wx" | bc -l)"
printf "| PyTorch DDP (Gloo, mp.spawn) | 2 | %s | %s | %s | %.1f ms | %.1f |\n" \
  "$params_py" "$batch" "$threads" "$py" "$(echo "2*$batch*1000/$py" | bc -l)"
printf "\nwxtrain speed-up over PyTorch DDP (PyTorch step time / wxtrain step time): **%.2fx**\n\n" "$(echo "$py/$wx" | bc -l)"

echo "| bucket_mb | buckets | issued during backward | exposed wait (ms) | whole allreduce (ms) | hidden share |"
echo "| ---: | ---: | ---: | ---: | ---: | ---: |"
for mb in 25 1 0.25; do
  "${mpirun_cmd[@]}" "$build/bench/ddp_step" --config "$config" --batch "$batch" --precision "$precision" \
      --warmup 2 --steps 1 --reps 1 --bucket-mb "$mb" --overlap-steps 15 > "$tmp/ov.txt"
  line=$(grep '^overlap' "$tmp/ov.txt")
  printf "| %s | %s | %s | %s | %s | %.0f%% |\n" "$mb" "$(field buckets <<<"$line")" \
    "$(field issued_during_backward <<<"$line")" "$(field exposed_wait_ms <<<"$line")" \
    "$(field whole_comm_ms <<<"$line")" "$(echo "100*$(field hidden_share <<<"$line")" | bc -l)"
done

if [ "${SKIP_BW:-0}" != 1 ]; then
  echo
  for r in $(seq "$bw_rounds"); do
    "${mpirun_cmd[@]}" "$build/bench/comm_bandwidth" | grep -E '^ *[0-9]+ [KM]iB' >> "$tmp/bw.txt"
  done
  echo "comm_bandwidth, median of $bw_rounds runs (each itself a median over repetitions):"
  echo
  echo "| size | Communicator (us) | Communicator GB/s | raw MPI (us) | raw MPI GB/s | busbw Communicator / raw (>1: Communicator faster) |"
  echo "| ---: | ---: | ---: | ---: | ---: | ---: |"
  awk '{print $1" "$2}' "$tmp/bw.txt" | sort -u -k2,2 -k1,1n | while read -r n unit; do
    rows=$(awk -v n="$n" -v u="$unit" '$1==n && $2==u' "$tmp/bw.txt")
    col() { awk -v c="$1" '{print $c}' <<<"$rows" | median; }
    echo "| $n $unit | $(col 3) | $(col 4) | $(col 5) | $(col 6) | $(col 7) |"
  done
fi
