#!/usr/bin/env bash
# Installs every system package Partita needs (idempotent: skips what is there).
# Usage: scripts/setup.sh            (as root, or with sudo available)
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build git python3
  llvm-22-dev llvm-22-tools libmlir-22-dev mlir-22-tools
  libgtest-dev libgmock-dev libbenchmark-dev
  libopenblas-dev openmpi-bin libopenmpi-dev
  # oneDNN: the cpu backend's bf16 contractions (PARTITA_ONEDNN, runtime/).
  libdnnl-dev
  libprotobuf-dev protobuf-compiler zlib1g-dev
  # CBC (COIN-OR branch and cut): dist-auto-shard's integer program.
  coinor-libcbc-dev
  python3-numpy python3-torch
  python3-venv python3-dev
  libtomlplusplus-dev python3-matplotlib
  # xmllint: lit checks `partita explain --svg` drawings (test/Tools).
  libxml2-utils
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

# The Python package's environment (python-bindings/): .venv from Debian's
# python3 with its site packages (numpy, python3-torch 1.13: never a PyPI
# torch), plus the pinned PyPI packages of python-bindings/requirements.txt
# (nanobind, scikit-build-core, pytest, jax and jaxlib CPU). Reinstalled when
# that file changes.
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
requirements="$root/python-bindings/requirements.txt"
if [ ! -x "$root/.venv/bin/python" ]; then
  /usr/bin/python3 -m venv --system-site-packages "$root/.venv"
fi
if ! cmp -s "$requirements" "$root/.venv/partita-requirements.txt"; then
  echo "setup: installing python-bindings/requirements.txt into .venv"
  "$root/.venv/bin/python" -m pip install -q --disable-pip-version-check \
    -r "$requirements"
  cp "$requirements" "$root/.venv/partita-requirements.txt"
else
  echo "setup: .venv has python-bindings/requirements.txt"
fi
# The build tree's package on .venv's path (a .pth file; an installed
# `pip install .` comes first): after scripts/build.sh,
# `.venv/bin/python -c "import partita"` works as it is.
site="$("$root/.venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo "$root/build/python-bindings" > "$site/partita-build.pth"
