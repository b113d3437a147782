#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test (GoogleTest and lit,
# both under ctest). Usage: scripts/test.sh [ctest args...]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
cd "$root/build"
ctest --output-on-failure "$@"
