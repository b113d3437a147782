#!/usr/bin/env bash
# For a GPU machine that has CUDA, NCCL, Protobuf, OpenBLAS, OpenMPI, gcc,
# CMake and Ninja but no LLVM or MLIR: configures and builds the runtime-only
# project (runtime/) from this repository, runs its unit tests (when
# GoogleTest is there), prints what nvidia-smi says about the GPUs, and runs
# every plan of PLAN_DIR with `partita-run --check`, on 4 local ranks and
# under `mpirun -np 4`. PLAN_DIR comes from scripts/make-gpu-check-plans.sh,
# run where LLVM is. Prints a summary line per plan; exits non-zero on any
# failure.
# With CUDA (configured with -DPARTITA_CUDA=ON) it also runs the cuda
# backend's GPU tests (a skip is a failure on a GPU machine),
# compute-sanitizer's memcheck and racecheck over them, and the plans of
# PLAN_DIR/cuda-plans.txt with `--backend cuda --check`. With --emulate
# (a machine without a GPU, CI) it configures with PARTITA_CUDA=AUTO,
# expects the GPU tests to report SKIPPED, and runs the cuda plans with
# `--backend cuda --emulate` (see docs/gpu.md for what that cannot show).
# Usage: scripts/gpu-check.sh [--emulate] [PLAN_DIR] [BUILD_DIR]
#   BUILD_DIR defaults to build-rt/ at the repository root.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
emulate=0
if [ "${1:-}" = "--emulate" ]; then
  emulate=1
  shift
fi
plans="${1:-}"
build="${2:-$root/build-rt}"
mkdir -p "$build" && build="$(cd "$build" && pwd)"
if [ -n "$plans" ]; then
  plans="$(cd "$plans" && pwd)" || { echo "FAILED: no plan folder $1"; exit 1; }
fi
jobs="$(nproc 2>/dev/null || echo 2)"
failures=0
fail() { echo "FAILED: $*"; failures=$((failures + 1)); }

echo "== configure and build the runtime-only project into $build"
cuda=ON
[ "$emulate" -eq 1 ] && cuda=AUTO
if ! cmake -G Ninja -S "$root/runtime" -B "$build" -DCMAKE_BUILD_TYPE=Release \
    -DPARTITA_CUDA="$cuda"; then
  echo "FAILED: configuring the runtime"
  exit 1
fi
if ! cmake --build "$build" -j"$jobs"; then
  echo "FAILED: building the runtime"
  exit 1
fi

echo "== unit tests"
if [ "$(ctest --test-dir "$build" -N 2>/dev/null | sed -n 's/^Total Tests: //p')" = "0" ]; then
  echo "no unit tests were built (GoogleTest not found)"
elif ! ctest --test-dir "$build" -j"$jobs" --output-on-failure; then
  fail "the runtime's unit tests"
fi

echo "== GPUs"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader ||
    fail "nvidia-smi"
else
  echo "nvidia-smi not found"
fi
command -v nvcc >/dev/null && nvcc --version | tail -1

echo "== cuda backend: GPU tests"
gputests="$build/bin/partita-runtime-tests-cuda-gpu"
if [ ! -x "$gputests" ]; then
  echo "not built (GoogleTest missing?)"
else
  "$gputests" --gtest_brief=1 >"$build/gpu-tests.log" 2>&1
  rc=$?
  tail -3 "$build/gpu-tests.log"
  if [ "$rc" -eq 77 ] && [ "$emulate" -eq 0 ]; then
    fail "the GPU tests were skipped on a machine meant to have a GPU"
  elif [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ]; then
    fail "the GPU tests (see $build/gpu-tests.log)"
  fi
  if [ "$rc" -eq 0 ]; then
    echo "== compute-sanitizer memcheck and racecheck"
    if ! command -v compute-sanitizer >/dev/null; then
      fail "compute-sanitizer not found"
    else
      for tool in memcheck racecheck; do
        if compute-sanitizer --tool "$tool" --error-exitcode 1 "$gputests" \
            --gtest_brief=1 --gtest_filter='*Softmax*:*LayerNorm*:*CrossEntropy*' \
            >"$build/sanitizer-$tool.log" 2>&1; then
          echo "$tool: clean"
        else
          fail "compute-sanitizer $tool (see $build/sanitizer-$tool.log)"
          tail -5 "$build/sanitizer-$tool.log"
        fi
      done
    fi
  fi
fi

if [ -z "$plans" ]; then
  echo "no PLAN_DIR given: plans not run"
  [ "$failures" -eq 0 ] && echo "gpu-check: ok" || echo "gpu-check: $failures failed"
  [ "$failures" -eq 0 ]
  exit
fi
run="$build/bin/partita-run"
if [ ! -x "$run" ]; then
  echo "FAILED: $run was not built (tools/partita-run/ is not in this" \
       "checkout), so the plans in $plans cannot be run"
  exit 1
fi
mpirun=(mpirun -np 4)
[ "$(id -u)" -eq 0 ] && mpirun+=(--allow-run-as-root --oversubscribe)

# One line per plan: FILE [PARTITA-RUN ARGS...] (plans.txt), else every *.pb.
if [ -f "$plans/plans.txt" ]; then
  list="$(cat "$plans/plans.txt")"
else
  list="$(cd "$plans" && ls *.pb 2>/dev/null)"
fi
[ -n "$list" ] || { echo "FAILED: no plans in $plans"; exit 1; }

echo "== plans in $plans"
summary=()
cd "$plans" || exit 1
while read -r plan args; do
  [ -n "$plan" ] || continue
  line="$plan:"
  # shellcheck disable=SC2086 # args are words from plans.txt
  for mode in local mpi; do
    log="$plan.$mode.log"
    start=$(date +%s%N)
    if [ "$mode" = local ]; then
      timeout 600 "$run" "$plan" --ranks 4 --check $args </dev/null >"$log" 2>&1
    elif command -v mpirun >/dev/null; then
      timeout 600 "${mpirun[@]}" "$run" "$plan" --comm mpi --check $args </dev/null >"$log" 2>&1
    else
      echo "mpirun not found" >"$log"
      false
    fi
    rc=$?
    ms=$((($(date +%s%N) - start) / 1000000))
    if [ "$rc" -eq 0 ]; then
      line+=" $mode ok ($((ms / 1000)).$((ms % 1000 / 100)) s)"
    else
      line+=" $mode FAILED (exit $rc, see $plans/$log)"
      failures=$((failures + 1))
      tail -5 "$log"
    fi
  done
  summary+=("$line")
done <<<"$list"

# The cuda backend on the plans it can run (one line per plan, as plans.txt).
if [ -f "$plans/cuda-plans.txt" ]; then
  echo "== cuda backend on the plans of cuda-plans.txt"
  backend=(--backend cuda)
  [ "$emulate" -eq 1 ] && backend+=(--emulate)
  while read -r plan args; do
    [ -n "$plan" ] || continue
    log="$plan.cuda.log"
    # shellcheck disable=SC2086 # args are words from cuda-plans.txt
    if timeout 600 "$run" "$plan" --check "${backend[@]}" $args </dev/null >"$log" 2>&1; then
      summary+=("$plan: cuda${backend[2]:+ (emulated)} ok")
    else
      summary+=("$plan: cuda FAILED (see $plans/$log)")
      failures=$((failures + 1))
      tail -5 "$log"
    fi
  done <"$plans/cuda-plans.txt"
fi

# The nccl communicator (nccl-plans.txt: plan, ranks, arguments): one GPU
# per rank under mpirun, or NCCL's layouts over local threads emulated.
if [ -f "$plans/nccl-plans.txt" ]; then
  echo "== nccl communicator on the plans of nccl-plans.txt"
  gpus=0
  command -v nvidia-smi >/dev/null && gpus="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')"
  while read -r plan ranks args; do
    [ -n "$plan" ] || continue
    log="$plan.nccl.log"
    if [ "$emulate" -eq 1 ]; then
      # shellcheck disable=SC2086 # args are words from nccl-plans.txt
      timeout 600 "$run" "$plan" --check --backend cuda --emulate --comm nccl $args </dev/null >"$log" 2>&1
    elif [ "$ranks" -gt "$gpus" ]; then
      summary+=("$plan: nccl skipped (needs $ranks GPUs, this machine has $gpus)")
      continue
    else
      # shellcheck disable=SC2086 # args are words from nccl-plans.txt
      timeout 600 mpirun -np "$ranks" "${mpirun[@]:3}" "$run" "$plan" --check --backend cuda --comm nccl $args </dev/null >"$log" 2>&1
    fi
    if [ $? -eq 0 ]; then
      summary+=("$plan: nccl on $ranks rank(s)$([ "$emulate" -eq 1 ] && echo ' (emulated)') ok")
    else
      summary+=("$plan: nccl FAILED (see $plans/$log)")
      failures=$((failures + 1))
      tail -5 "$log"
    fi
  done <"$plans/nccl-plans.txt"
fi

echo "== summary"
printf '%s\n' "${summary[@]}"
[ "$failures" -eq 0 ] && echo "gpu-check: ok" || echo "gpu-check: $failures failed"
[ "$failures" -eq 0 ]
