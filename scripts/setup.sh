#!/usr/bin/env bash
# Installs every system package Partita needs (idempotent: skips what is there).
# Usage: scripts/setup.sh            (as root, or with sudo available)
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build git python3
  llvm-22-dev llvm-22-tools libmlir-22-dev mlir-22-tools
  libgtest-dev libgmock-dev libbenchmark-dev
  libopenblas-dev openmpi-bin libopenmpi-dev
  libprotobuf-dev protobuf-compiler zlib1g-dev
  python3-numpy python3-torch
  # scripts/fuzz.sh (run by .ci/run): clang and its libFuzzer/ASan runtimes.
  clang libclang-rt-14-dev
)

missing=()
for pkg in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} system packages present"
else
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
