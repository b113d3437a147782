#!/usr/bin/env bash
# The main job, end to end: write a GPT model, annotate it for a 2x2 dp x tp
# mesh with the dp+megatron recipe, propagate shardings and print them;
# then compile it to a plan, run the plan on 4 local ranks (threads) and
# check it against the unpartitioned model run on one rank. Then train it:
# compile an AdamW train step for the same mesh, train 20 steps on the GPL
# text (byte-level) checked against one rank.
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
"$bin/partita" plan "$out/gpt.mlir" --mesh dp=2,tp=2 --strategy dp+megatron \
  --train adamw --lr 1e-3 -o "$out/gpt-train.pb"
"$bin/partita" run "$out/gpt-train.pb" --steps 20 --check --rtol 1e-4 \
  --param-rtol 1e-3
