#!/usr/bin/env bash
# Installs the dependencies, builds, and runs every test (unit, MPI under mpirun -np 2, command line,
# and against PhysicsNeMo's reference implementations in .venv-reference/ and anemoi's in
# .venv-anemoi/ and .venv-anemoi-datasets/).
# With the torch wheel's CUDA LibTorch this is the CUDA build (WXTRAIN_CUDA=ON), linked against the
# wheel's CUDA libraries; on a machine without a GPU it runs as a CPU program, and the tests say so.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
scripts/install_deps.sh
echo "dependencies ready after $(( $(date +%s) - start )) s"
# The two test-only environments download while the build compiles (pip waits on the network, the
# compiler on the CPU): mlflow and tensorboard, which the tracking tests read runs with, and
# PhysicsNeMo in its own environment (reusing .venv's torch) for the tests against the reference
# implementations (CTest label `reference`; without PyPI they are skipped, and ctest says so).
mkdir -p build
scripts/install_tracking_test_deps.sh > build/install_tracking_test_deps.log 2>&1 &
tracking_pid=$!
( scripts/install_reference_env.sh || echo "warning: no reference environment: the tests labelled 'reference' will be skipped" ) \
  > build/install_reference_env.log 2>&1 &
reference_pid=$!
# ECMWF's anemoi-models and anemoi-graphs (AIFS) in their own environment, also reusing .venv's
# torch (~75 s on a fresh machine, one step; the AIFS tests labelled 'reference' need it).
( scripts/install_anemoi_env.sh || echo "warning: no anemoi environment: the AIFS tests labelled 'reference' will be skipped" ) \
  > build/install_anemoi_env.log 2>&1 &
anemoi_pid=$!
# anemoi-datasets in its own environment, for data.reference.anemoi_open_dataset (~30 s).
( scripts/install_anemoi_datasets_env.sh || echo "warning: no anemoi-datasets environment: data.reference.anemoi_open_dataset will be skipped" ) \
  > build/install_anemoi_datasets_env.log 2>&1 &
anemoi_datasets_pid=$!
scripts/build.sh
echo "build finished after $(( $(date +%s) - start )) s"
tracking_status=0
wait "$tracking_pid" || tracking_status=$?
cat build/install_tracking_test_deps.log
[ "$tracking_status" = 0 ] || { echo "error: scripts/install_tracking_test_deps.sh failed (exit $tracking_status)" >&2; exit 1; }
wait "$reference_pid"
cat build/install_reference_env.log
wait "$anemoi_pid"
cat build/install_anemoi_env.log
wait "$anemoi_datasets_pid"
cat build/install_anemoi_datasets_env.log
echo "test environments ready after $(( $(date +%s) - start )) s"

# OpenMPI refuses to run as root without these; CI runs as root.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "running the tests ($(( $(date +%s) - start )) s so far)"
# Two tests at a time, each with OpenMP threads for every core (`wxtrain` sets one per core; see
# docs/architecture.md "Threads"): more threads than cores. libgomp's default lets a thread that
# waits at a barrier spin for a while first, and a spinning thread holds a core the other test's
# working thread needs; passive waiting gives it up. Two copies of
# Trainer.ShortRunOnTheStormBeatsPersistence at once took 186 s with the default and 15 s passive
# (median of two pairs side by side, on a machine loaded by other builds; docs/benchmarks.md).
export OMP_WAIT_POLICY=passive
# Two at a time on two cores: much of a test is starting a process and loading LibTorch, which
# overlaps well. Tests that need both cores say so (PROCESSORS 2, RUN_SERIAL) and run alone.
# ctest starts the longest tests first when it knows their times (CTestCostData.txt, which it
# writes after each run); a clean checkout has none, and the tests would start in the order they are
# declared, the longest (the zoo's training runs, the fuzz build) among the last, with one core
# idle at the end. tests/ctest_costs.txt holds the times of a full run (regenerated with
# `cp build/Testing/Temporary/CTestCostData.txt tests/ctest_costs.txt`).
if [ ! -f build/Testing/Temporary/CTestCostData.txt ]; then
  mkdir -p build/Testing/Temporary
  cp tests/ctest_costs.txt build/Testing/Temporary/CTestCostData.txt
fi
ctest --test-dir build --output-on-failure --timeout 900 -j "$(nproc)"
echo "install + build + tests: $(( $(date +%s) - start )) s"
