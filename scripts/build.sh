#!/usr/bin/env bash
# Configures (once) and builds Partita into build/ at the repository root.
# Concurrent callers are serialized with a lock, so they may share one tree.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build"
cd "$root"
exec 9>"/tmp/partita-build-$(echo "$build" | md5sum | cut -c1-8).lock"
flock 9
if [ ! -f "$build/build.ninja" ]; then
  cmake -G Ninja -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_COMPILER=gcc -DCMAKE_CXX_COMPILER=g++ -DPARTITA_CUDA=ON
fi
cmake --build "$build" "$@"
