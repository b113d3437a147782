#!/usr/bin/env bash
# Trains a small byte-level GPT with ZeRO-2 data parallelism on 4 local ranks,
# end to end with the `partita` driver, and shows what each step gives you:
#
#   1. partita model   writes the forward model as nn IR;
#   2. partita plan    differentiates it (AdamW), shards it (zero2 on dp=4),
#                      partitions it and buckets the gradient reductions;
#   3. partita explain prints the per-device memory (with the ZeRO accounting
#                      of each stage) and the collectives and their buckets;
#   4. partita run     trains STEPS steps on the GPL text, checked against
#                      one rank, and saves a checkpoint halfway;
#   5. partita run     resumes from the checkpoint under plain dp on 2 ranks
#                      (checkpoint shards carry their global offsets: any
#                      mesh takes them).
#
# Usage: examples/train-gpt/run.sh [OUT_DIR]   (default: build/example-train)
# Environment: BIN (default build/bin), STEPS (default 20), LAYERS, HIDDEN.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bin="${BIN:-$root/build/bin}"
out="${1:-$root/build/example-train}"
steps="${STEPS:-20}"
half=$((steps / 2))
mkdir -p "$out"
if [ ! -x "$bin/partita" ]; then
  echo "no $bin/partita: build first (scripts/build.sh)" >&2
  exit 1
fi
set -x
"$bin/partita" model gpt --layers "${LAYERS:-2}" --hidden "${HIDDEN:-64}" \
  --heads 4 --seq 32 --batch 8 --vocab 256 -o "$out/gpt.mlir"
"$bin/partita" plan "$out/gpt.mlir" --train adamw --lr 3e-3 \
  --strategy zero2 --mesh dp=4 --bucket-bytes 64KiB -o "$out/zero2.pb"
"$bin/partita" explain "$out/zero2.pb"
"$bin/partita" run "$out/zero2.pb" --steps "$half" --check --rtol 1e-4 \
  --param-rtol 1e-3 --save-checkpoint "$out/checkpoint"
"$bin/partita" plan "$out/gpt.mlir" --train adamw --lr 3e-3 \
  --strategy dp --mesh dp=2 -o "$out/dp.pb"
"$bin/partita" run "$out/dp.pb" --steps $((steps - half)) \
  --load-checkpoint "$out/checkpoint" --check --rtol 1e-4 --param-rtol 1e-3 \
  --profile --save-params "$out/params"
