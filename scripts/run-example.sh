#!/usr/bin/env bash
# The main job, end to end: write a GPT model, annotate it for a 2x2 dp x tp
# mesh with the dp+megatron recipe, propagate shardings and print them;
# then compile it to a plan, run the plan on 4 local ranks (threads) and
# check it against the unpartitioned model run on one rank.
# Usage: scripts/run-example.sh
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
  --emit propagated
"$bin/partita" plan "$out/gpt.mlir" --mesh dp=2,tp=2 --strategy dp+megatron \
  -o "$out/gpt.pb"
"$bin/partita" run "$out/gpt.pb" --ranks 4 --comm local --check
