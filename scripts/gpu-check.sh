#!/usr/bin/env bash
# For a GPU machine that has CUDA, NCCL, Protobuf, OpenBLAS, OpenMPI, gcc,
# CMake and Ninja but no LLVM or MLIR: configures and builds the runtime-only
# project (runtime/) from this repository, runs its unit tests (when
# GoogleTest is there), prints what nvidia-smi says about the GPUs, and runs
# every plan of PLAN_DIR with `partita-run --check`, on 4 local ranks and
# under `mpirun -np 4`. PLAN_DIR comes from scripts/make-gpu-check-plans.sh,
# run where LLVM is. Prints a summary line per plan; exits non-zero on any
# failure.
# Usage: scripts/gpu-check.sh [PLAN_DIR] [BUILD_DIR]
#   BUILD_DIR defaults to build-rt/ at the repository root.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
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
if ! cmake -G Ninja -S "$root/runtime" -B "$build" -DCMAKE_BUILD_TYPE=Release; then
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

echo "== summary"
printf '%s\n' "${summary[@]}"
[ "$failures" -eq 0 ] && echo "gpu-check: ok" || echo "gpu-check: $failures failed"
[ "$failures" -eq 0 ]
