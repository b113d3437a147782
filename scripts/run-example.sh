#!/usr/bin/env bash
# The main job, end to end: write a GPT model, annotate it for a 2x2 dp x tp
# mesh with the dp+megatron recipe, propagate shardings, print the result.
# Usage: scripts/run-example.sh [extra `partita plan` flags...]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
out="$root/build/example"
mkdir -p "$out"
bin="$root/build/bin"
set -x
"$bin/partita" model gpt --layers 2 --hidden 64 --heads 4 --seq 16 --vocab 256 \
  --batch 4 -o "$out/gpt.mlir"
"$bin/partita" plan "$out/gpt.mlir" --mesh dp=2,tp=2 --strategy dp+megatron \
  --emit propagated "$@"
