#!/usr/bin/env bash
# Builds and runs the embedding examples (examples/embed/) against installed
# prefixes, as an embedder would: compile/ against an install of the whole
# build (Partita::compiler), run-plan/ against the runtime-only install that
# scripts/check-runtime-only.sh left (Partita::runtime), configured where LLVM
# cannot be seen. The compile example writes a plan for a GPT model on a 2x2
# dp x tp mesh, which must equal the plan `partita plan` writes (but for
# source locations); the run example runs it on 4 local ranks and checks
# every result against the plan's unpartitioned reference program, and the
# installed `partita run --check` and the runtime-only install's partita-run
# --check (on 4 local ranks and under mpirun -np 4) run the same plan. ctest
# runs it as `embed-examples`.
# Usage: scripts/check-embed.sh BUILD_DIR RUNTIME_PREFIX WORK_DIR [cmake args...]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[ $# -ge 3 ] || {
  echo "usage: $0 BUILD_DIR RUNTIME_PREFIX WORK_DIR [cmake args...]" >&2
  exit 2
}
build="$(cd "$1" && pwd)" runtime_prefix="$(cd "$2" && pwd)" work="$3"
shift 3
rm -rf "$work"
mkdir -p "$work"
work="$(cd "$work" && pwd)"
full="$work/full"

step() { echo "== $*"; }
run_logged() { # run_logged LOG COMMAND...: quiet unless it fails
  local log="$1"
  shift
  "$@" >"$log" 2>&1 || { cat "$log"; echo "FAILED: $*"; exit 1; }
}

step "install the whole build into $full"
run_logged "$work/install.log" cmake --install "$build" --prefix "$full"

step "build examples/embed/compile against it (find_package(Partita), Partita::compiler)"
run_logged "$work/compile-configure.log" cmake -G Ninja -S "$root/examples/embed/compile" \
  -B "$work/compile" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$full" "$@"
run_logged "$work/compile-build.log" cmake --build "$work/compile"

step "build examples/embed/run-plan against the runtime-only install, LLVM hidden"
path="$(printf '%s' "$PATH" | tr ':' '\n' | grep -viE 'llvm|mlir' | paste -sd: -)"
ignored="$(ls -d /usr/lib/llvm-* 2>/dev/null | paste -sd';' - || true)"
run_logged "$work/run-plan-configure.log" env -u LLVM_DIR -u MLIR_DIR PATH="$path" \
  cmake -G Ninja --no-warn-unused-cli -S "$root/examples/embed/run-plan" -B "$work/run-plan" \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$runtime_prefix" \
  -DCMAKE_IGNORE_PREFIX_PATH="$ignored" \
  -DCMAKE_DISABLE_FIND_PACKAGE_LLVM=ON -DCMAKE_DISABLE_FIND_PACKAGE_MLIR=ON "$@"
run_logged "$work/run-plan-build.log" env PATH="$path" cmake --build "$work/run-plan"
if grep -inE 'llvm|mlir' "$work/run-plan/CMakeCache.txt" |
    grep -vE ':(CMAKE_DISABLE_FIND_PACKAGE_(LLVM|MLIR)|CMAKE_IGNORE_PREFIX_PATH):'; then
  echo "FAILED: the run-plan example's CMakeCache.txt names LLVM or MLIR (above)"
  exit 1
fi
if ldd "$work/run-plan/partita-embed-run-plan" | grep -iE 'llvm|mlir|not found'; then
  echo "FAILED: the run-plan example links the libraries above"
  exit 1
fi
# MPI stays the runtime's private business: no MPI header folder or library
# in the example's own build (libpartita_runtime.so may load libmpi itself).
if grep -iE 'openmpi|libmpi|mpich' "$work/run-plan/build.ninja" ||
    readelf -d "$work/run-plan/partita-embed-run-plan" | grep -i 'NEEDED.*mpi'; then
  echo "FAILED: the run-plan example's build needs MPI (above)"
  exit 1
fi

step "compile a GPT model for dp=2,tp=2 with the compile example"
"$full/bin/partita" model gpt --layers 2 --hidden 64 --heads 4 -o "$work/gpt.mlir"
"$work/compile/partita-embed-compile" "$work/gpt.mlir" dp=2,tp=2 dp+megatron "$work/gpt.pb"
"$full/bin/partita" plan "$work/gpt.mlir" --mesh dp=2,tp=2 --strategy dp+megatron \
  --quiet -o "$work/gpt-partita-plan.pb"
# The same plan but for source locations: partita plan's model reader names
# each op's location after its SSA name, the example keeps file:line:col
# (and so for the content checksum, which covers the locations).
package="$(sed -n 's/^package \(.*\);/\1/p' "$root/runtime/plan/plan.proto")"
for plan in gpt gpt-partita-plan; do
  protoc --decode="$package.Plan" -I "$root/runtime" "$root/runtime/plan/plan.proto" \
    <"$work/$plan.pb" | grep -v -e '^ *location: ' -e '^checksum: ' >"$work/$plan.txt"
done
if ! diff "$work/gpt.txt" "$work/gpt-partita-plan.txt" >"$work/plan.diff"; then
  head -20 "$work/plan.diff"
  echo "FAILED: the compile example's plan differs from partita plan's for the same" \
       "model, mesh and strategy (above; it should run the same pipeline)"
  exit 1
fi

step "run it with the run-plan example on 4 local ranks"
"$work/run-plan/partita-embed-run-plan" "$work/gpt.pb" 4

step "run it with the installed partita run --check"
"$full/bin/partita" run "$work/gpt.pb" --ranks 4 --check
step "run it with the runtime-only partita-run --check on 4 local ranks"
"$runtime_prefix/bin/partita-run" "$work/gpt.pb" --ranks 4 --check
if command -v mpirun >/dev/null; then
  step "run it with the runtime-only partita-run --check under mpirun -np 4"
  mpirun=(mpirun -np 4)
  [ "$(id -u)" -eq 0 ] && mpirun+=(--allow-run-as-root --oversubscribe)
  "${mpirun[@]}" "$runtime_prefix/bin/partita-run" "$work/gpt.pb" --comm mpi --check
else
  echo "mpirun not found: the MPI run of the runtime-only partita-run is not checked"
fi
echo "embed-examples: ok"
