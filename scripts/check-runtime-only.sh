#!/usr/bin/env bash
# Builds and installs the runtime-only project (runtime/) where LLVM and MLIR
# cannot be seen, then checks that no LLVM or MLIR path reached its
# configuration (CMakeCache.txt) or its binaries (ldd). ctest runs it as
# `runtime-only-build`; scripts/check-embed.sh then builds the runtime example
# against the install it leaves.
# Usage: scripts/check-runtime-only.sh WORK_DIR [cmake args...]
#   WORK_DIR/build is the build tree, WORK_DIR/prefix the install (WORK_DIR is
#   emptied first).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[ $# -ge 1 ] || { echo "usage: $0 WORK_DIR [cmake args...]" >&2; exit 2; }
work="$1"
shift
rm -rf "$work"
mkdir -p "$work"
work="$(cd "$work" && pwd)"
build="$work/build"
prefix="$work/prefix"

# LLVM cannot be uninstalled here, so it is hidden: no LLVM folder on PATH, no
# CMAKE_PREFIX_PATH or LLVM_DIR/MLIR_DIR from the caller, every
# /usr/lib/llvm-* prefix ignored by find_* calls, and find_package(LLVM) and
# find_package(MLIR) disabled, so configuring would fail if the runtime's
# CMake looked for either.
path="$(printf '%s' "$PATH" | tr ':' '\n' | grep -viE 'llvm|mlir' | paste -sd: -)"
ignored="$(ls -d /usr/lib/llvm-* 2>/dev/null | paste -sd';' - || true)"
hidden=(env -u CMAKE_PREFIX_PATH -u LLVM_DIR -u MLIR_DIR PATH="$path")

start=$(date +%s)
"${hidden[@]}" cmake -G Ninja --no-warn-unused-cli -S "$root/runtime" -B "$build" \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$prefix" \
  -DCMAKE_IGNORE_PREFIX_PATH="$ignored" \
  -DCMAKE_DISABLE_FIND_PACKAGE_LLVM=ON -DCMAKE_DISABLE_FIND_PACKAGE_MLIR=ON \
  "$@" >"$work/configure.log" || { cat "$work/configure.log"; exit 1; }
"${hidden[@]}" cmake --build "$build" -j"${PARTITA_JOBS:-2}" >"$work/build.log" ||
  { tail -50 "$work/build.log"; exit 1; }
"${hidden[@]}" cmake --install "$build" >"$work/install.log" ||
  { cat "$work/install.log"; exit 1; }
echo "runtime-only: configured, built and installed in $(($(date +%s) - start)) s"

fail=0
# (Except the lines of the hiding options above.)
if grep -inE 'llvm|mlir' "$build/CMakeCache.txt" |
    grep -vE ':(CMAKE_DISABLE_FIND_PACKAGE_(LLVM|MLIR)|CMAKE_IGNORE_PREFIX_PATH):'; then
  echo "FAILED: the lines above of $build/CMakeCache.txt name LLVM or MLIR"
  fail=1
fi
# Every ELF file built or installed: libraries, partita-run, the unit tests.
products=$(find "$build/bin" "$build/lib" "$prefix" -type f \( -perm -u+x -o -name '*.so*' \) \
  -exec sh -c 'head -c4 "$1" | grep -q ELF' _ {} \; -print)
[ -n "$products" ] || { echo "FAILED: nothing was built"; exit 1; }
for file in $products; do
  if ldd "$file" | grep -iE 'llvm|mlir|not found'; then
    echo "FAILED: $file links the libraries above"
    fail=1
  fi
done
for expected in "$prefix"/lib/libpartita_runtime.so.[0-9]* "$prefix"/lib/libpartita_plan.so.[0-9]* \
    "$prefix/include/partita/runtime/Executor.h" \
    "$prefix/include/partita/runtime/plan/plan.pb.h" \
    "$prefix/lib/cmake/Partita/PartitaConfig.cmake"; do
  [ -e "$expected" ] || { echo "FAILED: the install lacks $expected"; fail=1; }
done
if [ -f "$root/tools/partita-run/CMakeLists.txt" ] && [ ! -x "$prefix/bin/partita-run" ]; then
  echo "FAILED: the install lacks bin/partita-run"
  fail=1
fi
if [ -f "$prefix/lib/cmake/Partita/PartitaCompilerTargets.cmake" ]; then
  echo "FAILED: a runtime-only install exports the compiler"
  fail=1
fi
[ "$fail" -eq 0 ] || exit 1
echo "runtime-only: no LLVM or MLIR in CMakeCache.txt or in ldd of $(echo "$products" | wc -w) binaries"
