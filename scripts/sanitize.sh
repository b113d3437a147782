#!/usr/bin/env bash
# Builds Partita with AddressSanitizer and UndefinedBehaviorSanitizer into
# build-asan/ (one configure of the whole project, so the runtime's objects
# serve both stages) and runs under them:
# - always (CI): the runtime's unit tests, the MPI communicator's tests
#   under mpirun (the lit tests that run partita-mpi-comm-test), and the plan
#   mutation harness (test/Runtime/cpu/Inputs/mutate_plans.py) with the
#   sanitized partita-run on plans that build/bin/partita compiles (run
#   scripts/build.sh first);
# - with --tools, also the compiler's tools (partita, partita-opt,
#   partita-translate) and the lit suite but plan-mutation.test (the harness
#   above runs it with the sanitized runner) under them. Not yet in CI: its
#   build has not been measured or run through once (see docs/testing.md).
# Any sanitizer report fails the run (-fno-sanitize-recover, halt_on_error).
# Usage: scripts/sanitize.sh [--tools] [MUTANTS_PER_PLAN=500]
#
# gcc, -O1 -g1: line tables for the reports at less compile time than -O2 -g.
# Not instrumented: Debian's libMLIR.so, OpenMPI, OpenBLAS, protobuf. The
# reports they cause, each shown to come from there (scripts/sanitizers/
# says how), and what this script does about each:
# - libMLIR.so (only with --tools): LLVM's inline allocators
#   (BumpPtrAllocator) call ASan's user-poisoning API when the including file
#   is built with ASan; a slab that Partita's code starts is poisoned, then
#   libMLIR.so's own code (built without ASan) hands out pieces of it without
#   unpoisoning them, and the next instrumented read reports
#   use-after-poison (scripts/fuzz.sh met the same). allow_user_poisoning=0
#   turns off only that API: heap, stack and global checks stay on.
# - OpenMPI keeps what MPI_Init allocates until exit: LeakSanitizer's
#   reports from the MPI tests are suppressed by module
#   (scripts/sanitizers/lsan-openmpi.supp, given to that run only).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools=0
if [ "${1:-}" = "--tools" ]; then
  tools=1
  shift
fi
per_plan="${1:-500}"
build="$root/build-asan"
supp="$root/scripts/sanitizers"
flags="-fsanitize=address,undefined -fno-omit-frame-pointer"
flags="$flags -fno-sanitize-recover=undefined"
# build-asan/ held the runtime-only project before: configure afresh.
if [ -f "$build/CMakeCache.txt" ] &&
  ! grep -qx "CMAKE_HOME_DIRECTORY:INTERNAL=$root" "$build/CMakeCache.txt"; then
  rm -rf "$build"
fi
if [ ! -f "$build/build.ninja" ]; then
  cmake -G Ninja -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER=gcc -DCMAKE_CXX_COMPILER=g++ -DPARTITA_CUDA=OFF \
    "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" \
    "-DCMAKE_C_FLAGS=$flags" "-DCMAKE_CXX_FLAGS=$flags" \
    "-DCMAKE_EXE_LINKER_FLAGS=$flags" "-DCMAKE_SHARED_LINKER_FLAGS=$flags"
fi
unit_tests=(partita-runtime-tests-comm partita-runtime-tests-core
  partita-runtime-tests-cpu partita-runtime-tests-cuda-emulator
  partita-runtime-tests-cuda-kernels partita-runtime-tests-train)
targets=(partita-run partita-mpi-comm-test "${unit_tests[@]}")
[ "$tools" = 1 ] && targets+=(partita partita-opt partita-translate
  PartitaTestKernels PartitaTestKernelsWrong)
cmake --build "$build" --target "${targets[@]}"

export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
for t in "${unit_tests[@]}"; do
  echo "sanitize: $t"
  filter=()
  # The emulated kernels' f64 instances (CudaKernelsTest/1.*) are the same
  # templates as the f32 ones, which run here (issue 17 asks for fp32 clean
  # under the sanitizers); under ASan the f64 attention tests alone took
  # minutes of CI's 45. scripts/test.sh runs both types unsanitized.
  [ "$t" = partita-runtime-tests-cuda-kernels ] &&
    filter=(--gtest_filter=-CudaKernelsTest/1.*)
  "$build/bin/$t" --gtest_brief=1 "${filter[@]}"
done

# lit: a report makes the tool exit non-zero, so its test fails. The MPI
# run unwinds every malloc fully: OpenMPI's plug-ins have no frame pointers
# and are unloaded by exit, so the fast unwinder's stacks match no
# suppression (lsan-openmpi.supp says more).
lit=/usr/lib/llvm-22/bin/lit
mpi_env=(env "ASAN_OPTIONS=fast_unwind_on_malloc=0:$ASAN_OPTIONS"
  "LSAN_OPTIONS=suppressions=$supp/lsan-openmpi.supp:${LSAN_OPTIONS:-}")
if [ "$tools" = 1 ]; then
  ASAN_OPTIONS="allow_user_poisoning=0:$ASAN_OPTIONS" \
    "$lit" -sv "$build/test" --filter-out 'Runtime/mpi/|Runtime/cpu/plan-mutation'
  "${mpi_env[@]}" "$lit" -sv "$build/test/Runtime/mpi"
else
  mpi_tests=()
  for t in "$root"/test/Runtime/mpi/*.test; do
    grep -q 'partita-mpi-comm-test' "$t" && mpi_tests+=("$build/test/Runtime/mpi/$(basename "$t")")
  done
  "${mpi_env[@]}" "$lit" -sv "${mpi_tests[@]}"
fi

partita="$root/build/bin/partita"
[ "$tools" = 1 ] && partita="$build/bin/partita"
[ -x "$partita" ] || { echo "sanitize: $partita missing (run scripts/build.sh)" >&2; exit 1; }
work="$build/mutation"
rm -rf "$work" && mkdir -p "$work"
"$partita" model mlp --layers 1 -o "$work/mlp.mlir"
"$partita" plan "$work/mlp.mlir" --strategy dp --mesh dp=2 --quiet -o "$work/mlp.pb"
"$partita" model gpt --layers 1 --batch 2 --seq 8 --hidden 16 --heads 2 --vocab 256 \
  -o "$work/lm.mlir"
"$partita" plan "$work/lm.mlir" --train adamw --strategy dp --mesh dp=2 --quiet \
  -o "$work/train.pb"
# The harness counts a sanitizer report as a crash. A mutated plan may ask
# for a huge buffer: the allocator then fails (an Error), not the machine.
export ASAN_OPTIONS="exitcode=99:allocator_may_return_null=1:max_allocation_size_mb=4096:$ASAN_OPTIONS"
export UBSAN_OPTIONS="exitcode=99:$UBSAN_OPTIONS"
python3 "$root/test/Runtime/cpu/Inputs/mutate_plans.py" --sanitized \
  --runner "$build/bin/partita-run" \
  --protoc "$(command -v protoc)" --proto "$root/runtime/plan/plan.proto" \
  --work "$work/mutants" --per-plan "$per_plan" \
  "$work/mlp.pb:--check" "$work/train.pb:--steps,2"
