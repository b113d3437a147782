#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test (GoogleTest and lit,
# both under ctest). Usage: scripts/test.sh [ctest args...]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
cd "$root/build"
rm -f test/lit-results.json
status=0
# One job per core; tests that use the whole machine (lit, the nested
# builds, local ranks) claim every core (PROCESSORS), so they run alone.
ctest --output-on-failure -j "$(nproc)" "$@" || status=$?
if [[ $status -ne 0 && -f test/lit-results.json ]]; then
  python3 "$root/scripts/lit-failures.py" test/lit-results.json
fi
exit $status
